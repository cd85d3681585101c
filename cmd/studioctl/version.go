package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version, commit and date are stamped at release time with -ldflags
// "-X main.version=... -X main.commit=... -X main.date=..."
// (.goreleaser.yaml). Unstamped, commit and date come from the build's
// version control information, when the binary was built in a checkout.
var (
	version = "dev"
	commit  = ""
	date    = ""
)

// buildCommitDate is the commit and the build (or commit) date: the
// stamped ones, else the VCS revision and time Go recorded, else
// "unknown".
func buildCommitDate() (c, d string) {
	c, d = commit, date
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && c == "":
				c = s.Value
			case s.Key == "vcs.time" && d == "":
				d = s.Value
			}
		}
	}
	if c == "" {
		c = "unknown"
	}
	if d == "" {
		d = "unknown"
	}
	return c, d
}

// buildVersion is version, or the module version when built with go install.
func buildVersion() string {
	if version != "dev" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return version
}

// versionOptions are the dependencies of version.
type versionOptions struct {
	deps
}

func newVersionCmd(a *app, runF func(context.Context, *versionOptions) error) *cobra.Command {
	o := &versionOptions{deps: a.deps()}
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version",
		Example: "  studioctl version",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return versionRun(cmd.Context(), o)
		},
	}
}

// versionRun prints the version, the platform, the Go version, the commit
// and the build date.
func versionRun(_ context.Context, o *versionOptions) error {
	_, err := fmt.Fprintln(o.IO.Out, versionLine())
	return err
}

// versionLine is what version and --version print: the version, the
// platform, the Go version, the commit and the build date.
func versionLine() string {
	c, d := buildCommitDate()
	return fmt.Sprintf("studioctl %s %s/%s %s commit=%s built=%s", buildVersion(), runtime.GOOS, runtime.GOARCH, runtime.Version(), c, d)
}
