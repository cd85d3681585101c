package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/output"
)

type eventsOptions struct {
	follow bool
	wait   time.Duration
	count  int
}

// eventJSON is one bus message as events -o json prints it: the message's
// own fields plus when this client received it.
type eventJSON struct {
	ReceivedAt time.Time `json:"received_at" yaml:"received_at"`
	bus.Message
}

func (a *app) newEventsCmd() *cobra.Command {
	var o eventsOptions
	cmd := &cobra.Command{
		Use:   "events [--follow] [--wait D] [--count N]",
		Short: "Print every message on the bus",
		Long: `Listen on the bus (LISTEN studio) and print every message: stream frames,
run-seq batches and signals (docs/bus.md describes the format). Without
--follow it listens for --wait (default 5s) and exits; with --follow it runs
until interrupted. --count stops after N messages. -o json prints one JSON
object per line.`,
		Example: `  studioctl events --follow
  studioctl events --follow -o json | jq .kind`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.count < 0 {
				return usageErrorf("--count: must not be negative, got %d", o.count)
			}
			if o.wait <= 0 && !o.follow {
				return usageErrorf("--wait: must be positive, got %s", o.wait)
			}
			return a.events(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVarP(&o.follow, "follow", "f", false, "keep listening until interrupted")
	cmd.Flags().DurationVar(&o.wait, "wait", 5*time.Second, "without --follow, how long to listen")
	cmd.Flags().IntVar(&o.count, "count", 0, "stop after this many messages (0: no limit)")
	return cmd
}

func (a *app) events(ctx context.Context, o eventsOptions) error {
	cs, err := a.connString(ctx)
	if err != nil {
		return err
	}
	cfg, err := db.ParseConnConfig(cs)
	if err != nil {
		return &usageError{err: err}
	}
	p := a.printer()
	msgs := make(chan bus.Message, 1024)
	l := bus.NewListener(cfg, cs, bus.Options{Handler: func(m bus.Message) {
		select {
		case msgs <- m:
		default: // a reader that cannot keep up loses messages rather than stalling the listener
		}
	}, OnResync: func() { fmt.Fprintln(a.stderr, "bus reconnected: messages may have been missed") }})
	if err := l.Start(ctx); err != nil {
		return err
	}
	defer l.Stop()
	fmt.Fprintln(a.stderr, "listening on the bus (channel "+bus.Channel+")")
	var timeout <-chan time.Time
	if !o.follow {
		timeout = time.After(o.wait)
	}
	n := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timeout:
			return nil
		case m := <-msgs:
			if err := printEvent(a, p, m); err != nil {
				return err
			}
			n++
			if o.count > 0 && n >= o.count {
				return nil
			}
		}
	}
}

func printEvent(a *app, p *output.Printer, m bus.Message) error {
	now := a.now().UTC()
	if p.Structured() {
		return p.JSONLine(eventJSON{ReceivedAt: now, Message: m})
	}
	var what string
	switch m.Type {
	case "signal":
		what = fmt.Sprintf("signal  %s %s", m.Kind, m.Key)
	case "seqs":
		what = fmt.Sprintf("seqs    %v", m.Seqs)
	case "frame":
		what = fmt.Sprintf("frame   stream=%s id=%s event=%s bytes=%d", m.Stream, m.ID, m.Event, len(m.Data))
		if m.Truncated {
			what += " truncated"
		}
	default:
		what = m.Type
	}
	_, err := fmt.Fprintf(a.stdout, "%s  %s\n", now.Format(time.RFC3339Nano), what)
	return err
}
