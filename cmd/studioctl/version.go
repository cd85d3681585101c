package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at release time with -ldflags "-X main.version=...".
var version = "dev"

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

// versionRun prints the version, the platform and the Go version.
func versionRun(_ context.Context, o *versionOptions) error {
	_, err := fmt.Fprintln(o.IO.Out, versionLine())
	return err
}

// versionLine is what version and --version print: the version, the
// platform and the Go version.
func versionLine() string {
	return fmt.Sprintf("studioctl %s %s/%s %s", buildVersion(), runtime.GOOS, runtime.GOARCH, runtime.Version())
}
