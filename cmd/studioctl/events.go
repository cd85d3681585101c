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

// eventsOptions are the flags and dependencies of events.
type eventsOptions struct {
	deps
	Follow bool
	Wait   time.Duration
	Count  int
	// ConnString resolves the database to listen on.
	ConnString func(context.Context) (string, error)
}

// eventJSON is one bus message as events -o json prints it: the message's
// own fields plus when this client received it.
type eventJSON struct {
	ReceivedAt time.Time `json:"received_at" yaml:"received_at"`
	bus.Message
}

func newEventsCmd(a *app, runF func(context.Context, *eventsOptions) error) *cobra.Command {
	o := &eventsOptions{deps: a.deps(), ConnString: a.connString}
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
			if o.Count < 0 {
				return usageErrorf("--count: must not be negative, got %d", o.Count)
			}
			if o.Wait <= 0 && !o.Follow {
				return usageErrorf("--wait: must be positive, got %s", o.Wait)
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return eventsRun(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVarP(&o.Follow, "follow", "f", false, "keep listening until interrupted")
	cmd.Flags().DurationVar(&o.Wait, "wait", 5*time.Second, "without --follow, how long to listen")
	cmd.Flags().IntVar(&o.Count, "count", 0, "stop after this many messages (0: no limit)")
	return withFormats(cmd, output.Table, output.JSON)
}

// eventsRun listens on the bus and prints every message.
func eventsRun(ctx context.Context, o *eventsOptions) error {
	cs, err := o.ConnString(ctx)
	if err != nil {
		return err
	}
	cfg, err := db.ParseConnConfig(cs)
	if err != nil {
		return &usageError{err: err}
	}
	p := o.Printer()
	msgs := make(chan bus.Message, 1024)
	l := bus.NewListener(cfg, cs, bus.Options{Handler: func(m bus.Message) {
		select {
		case msgs <- m:
		default: // a reader that cannot keep up loses messages rather than stalling the listener
		}
	}, OnResync: func() { fmt.Fprintln(o.IO.Err, "bus reconnected: messages may have been missed") }})
	if err := l.Start(ctx); err != nil {
		return err
	}
	defer l.Stop()
	fmt.Fprintln(o.IO.Err, "listening on the bus (channel "+bus.Channel+")")
	var timeout <-chan time.Time
	if !o.Follow {
		timeout = time.After(o.Wait)
	}
	n := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timeout:
			return nil
		case m := <-msgs:
			if err := printEvent(o, p, m); err != nil {
				return err
			}
			n++
			if o.Count > 0 && n >= o.Count {
				return nil
			}
		}
	}
}

func printEvent(o *eventsOptions, p *output.Printer, m bus.Message) error {
	now := o.Now().UTC()
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
	_, err := fmt.Fprintf(o.IO.Out, "%s  %s\n", now.Format(time.RFC3339Nano), what)
	return err
}
