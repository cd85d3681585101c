package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// probeTimeout bounds one probe (a healthcheck's own timeout is longer).
const probeTimeout = 5 * time.Second

// probeOptions are what probe depends on.
type probeOptions struct {
	deps
	// Listen is replica.listen, or --listen.
	Listen string
	Path   string
	Client *http.Client
}

// newProbeCmd is `studioctl probe [PATH]`: the HTTP probe of a replica
// from inside its own image, which has no shell and no curl (a compose
// healthcheck; deploy/compose/compose.ha.yaml).
func newProbeCmd(a *app, runF func(context.Context, *probeOptions) error) *cobra.Command {
	o := &probeOptions{deps: a.deps(), Client: &http.Client{Timeout: probeTimeout}}
	var listen string
	cmd := &cobra.Command{
		Use:   "probe [PATH] [--listen ADDR]",
		Short: "Ask a replica's HTTP server for /readyz (or PATH): exit 0 on 200",
		Long: `Probe asks the replica's HTTP server for PATH (default /readyz) and exits
0 when it answers 200, 1 otherwise (the answer's status and body in the
error). It prints the body on stdout. The address is --listen, else
replica.listen (STUDIO_REPLICA_LISTEN) with 0.0.0.0 or :: read as
127.0.0.1: the container's own server. It is the healthcheck of the image,
which has no shell and no curl (deploy/compose/compose.ha.yaml).`,
		Example: `  studioctl probe
  studioctl probe /livez
  studioctl probe --listen 127.0.0.1:8081 /readyz`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageErrorf("%s: unexpected argument %q (usage: %s)", cmd.CommandPath(), args[1], cmd.UseLine())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Path = "/readyz"
			if len(args) == 1 {
				o.Path = args[0]
			}
			if !strings.HasPrefix(o.Path, "/") {
				return usageErrorf("probe: PATH %q must start with /", o.Path)
			}
			o.Listen = a.cfg.Replica.Listen
			if cmd.Flags().Changed("listen") {
				o.Listen = listen
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return probeRun(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "", "the replica's HTTP address (default replica.listen)")
	return withoutOutput(cmd)
}

// probeAddr turns a listen address into one to connect to: an unspecified
// host is this host's loopback; port 0 cannot be probed.
func probeAddr(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", usageErrorf("probe: replica.listen (STUDIO_REPLICA_LISTEN) or --listen %q: %v", listen, err)
	}
	if port == "0" || port == "" {
		return "", usageErrorf("probe: replica.listen (STUDIO_REPLICA_LISTEN) or --listen %q has no fixed port: pass --listen HOST:PORT", listen)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// probeRun GETs the path and maps the answer to the exit code.
func probeRun(ctx context.Context, o *probeOptions) error {
	addr, err := probeAddr(o.Listen)
	if err != nil {
		return err
	}
	url := "http://" + addr + o.Path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return usageErrorf("probe: %v", err)
	}
	resp, err := o.Client.Do(req)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	text := strings.TrimSpace(string(body))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("probe: GET %s: %s: %s", url, resp.Status, text)
	}
	_, err = fmt.Fprintln(o.IO.Out, text)
	return err
}
