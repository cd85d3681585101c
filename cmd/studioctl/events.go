package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/output"
	"github.com/studioctl/studioctl/internal/stream"
)

// eventsOptions are the flags and dependencies of events.
type eventsOptions struct {
	deps
	Follow bool
	Wait   time.Duration
	Count  int
	// Since, when set (>= 0), reads the installation's event stream
	// (studio_event, docs/events.md) after that id instead of raw bus
	// messages.
	Since int64
	// ConnString resolves the database to listen on (database.listen_url
	// when set: LISTEN needs a session of its own).
	ConnString func(context.Context) (string, error)
	// ListenURLSet: database.listen_url is set (ConnString is it).
	ListenURLSet bool
	// Raw prints the bus messages themselves (stream frames, run-seq
	// batches, signals) instead of the events.
	Raw bool
}

// eventJSON is one bus message as events -o json prints it: the message's
// own fields plus when this client received it.
type eventJSON struct {
	ReceivedAt time.Time `json:"received_at" yaml:"received_at"`
	bus.Message
}

func newEventsCmd(a *app, runF func(context.Context, *eventsOptions) error) *cobra.Command {
	o := &eventsOptions{deps: a.deps(), ConnString: a.sessionConnString}
	cmd := &cobra.Command{
		Use:   "events [--follow] [--wait D] [--count N] [--since ID] [--raw]",
		Short: "Print the installation's events as they commit",
		Long: `Print the installation's event stream, as GET /v1/events serves it
(docs/events.md): each event's id, time, name and data, decoded. Without
--since it starts at the newest event and prints each new one as it
commits; --since ID first prints the events after ID, read from
studio_event (at most 1,000, else a resync line and the newest id); --since
0 starts at the oldest kept. Without --follow it stops after --wait
(default 5s); with --follow it runs until interrupted. --count stops after N
events. -o json prints one JSON object per line.

--raw prints the bus messages themselves instead (LISTEN studio, docs/bus.md):
the stream's frames, run-seq batches and signals, as they arrive. A frame
of the events stream only announces a committed event and carries no data
(the database marks it truncated): the data is in studio_event, which the
default output reads, so nothing is lost.`,
		Example: `  studioctl events --follow
  studioctl events --follow --since 1234
  studioctl events --follow -o json | jq .event
  studioctl events --follow --raw`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.ListenURLSet = a.cfg.Database.ListenURL != ""
			if o.Count < 0 {
				return usageErrorf("--count: must not be negative, got %d", o.Count)
			}
			if o.Wait <= 0 && !o.Follow {
				return usageErrorf("--wait: must be positive, got %s", o.Wait)
			}
			if !cmd.Flags().Changed("since") {
				o.Since = -1
			} else if o.Since < 0 {
				return usageErrorf("--since: must be an event id (0 or more), got %d", o.Since)
			} else if o.Raw {
				return usageErrorf("--since and --raw: the bus keeps no messages to replay; --since reads the event stream")
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return eventsRun(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVarP(&o.Follow, "follow", "f", false, "keep listening until interrupted")
	cmd.Flags().DurationVar(&o.Wait, "wait", 5*time.Second, "without --follow, how long to listen")
	cmd.Flags().IntVar(&o.Count, "count", 0, "stop after this many events (or messages with --raw; 0: no limit)")
	cmd.Flags().Int64Var(&o.Since, "since", -1, "first print the events after this event id (docs/events.md)")
	cmd.Flags().BoolVar(&o.Raw, "raw", false, "print the bus messages themselves (frames, run-seq batches, signals: docs/bus.md)")
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
	// Through a pooler in transaction mode LISTEN lands on a server
	// session this client does not keep: nothing would ever be printed.
	shared, err := db.SharesSessions(ctx, cfg, cs)
	if err != nil {
		return err
	}
	if shared {
		return sharedSessionsError(o.ListenURLSet, "events listens on the bus (LISTEN)")
	}
	p := o.Printer()
	if !o.Raw {
		return followStream(ctx, o, p, cfg, cs)
	}
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
		switch {
		case m.Truncated && m.Stream == stream.BusStream:
			// An announcement without data, by design (docs/events.md).
			what += " (data in studio_event)"
		case m.Truncated:
			what += " truncated"
		}
	default:
		what = m.Type
	}
	// Any role that can connect can NOTIFY: a forged message's fields are
	// shown with control characters as escapes, never sent to the terminal.
	_, err := fmt.Fprintf(o.IO.Out, "%s  %s\n", now.Format(time.RFC3339Nano), output.Safe(what))
	return err
}

// streamLine is one event of the stream as events --since -o json prints it.
type streamLine struct {
	ID    int64           `json:"id" yaml:"id"`
	At    time.Time       `json:"at" yaml:"at"`
	Event string          `json:"event" yaml:"event"`
	Data  json.RawMessage `json:"data" yaml:"data"`
}

// followStream prints the event stream after o.Since (from the newest
// when it is negative): the replay, then each event as the bus announces
// it, through the same hub a replica's /v1/events uses.
func followStream(ctx context.Context, o *eventsOptions, p *output.Printer, cfg *pgx.ConnConfig, cs string) error {
	pool, err := o.DB(ctx)
	if err != nil {
		return err
	}
	hub := stream.NewHub(stream.HubOptions{DB: pool})
	if err := hub.Start(ctx); err != nil {
		return err
	}
	defer hub.Stop()
	l := bus.NewListener(cfg, cs, bus.Options{
		Handler: func(m bus.Message) {
			if m.Type == bus.TypeFrame && m.Stream == stream.BusStream {
				hub.Wake()
			}
		},
		OnResync: hub.Wake,
	})
	if err := l.Start(ctx); err != nil {
		return err
	}
	defer l.Stop()
	n, last := 0, o.Since
	fromNow := last < 0
	print := func(e stream.Event) (bool, error) {
		var err error
		if p.Structured() {
			err = p.JSONLine(streamLine{ID: e.ID, At: e.At, Event: e.Name, Data: e.Data})
		} else {
			_, err = fmt.Fprintf(o.IO.Out, "%d  %s  %-8s %s\n", e.ID, e.At.Format(time.RFC3339Nano), e.Name, output.Safe(string(e.Data)))
		}
		n, last = n+1, e.ID
		return o.Count > 0 && n >= o.Count, err
	}
	var timeout <-chan time.Time
	if !o.Follow {
		timeout = time.After(o.Wait)
	}
	for {
		// A reader that fell behind is dropped by the hub, as a slow SSE
		// client is; like one, it resumes after the last event it printed.
		// So does one whose ids went back under it (stream.ErrReset): its
		// last id then gets a resync.
		sub, err := hub.Subscribe(ctx, max(last, 0), fromNow)
		if err != nil {
			return err
		}
		if fromNow {
			// From here on it resumes after what it printed, as --since.
			fromNow, last = false, sub.Cursor
			fmt.Fprintf(o.IO.Err, "following the event stream after event %d (the newest)\n", last)
		}
		stop, err := printSub(ctx, o, sub, timeout, print)
		sub.Close()
		if err != nil || stop || !resumable(sub.Err()) {
			return err
		}
	}
}

// printSub prints one subscription until it ends, the wait is over, or
// print says stop.
func printSub(ctx context.Context, o *eventsOptions, sub *stream.Sub, timeout <-chan time.Time, print func(stream.Event) (bool, error)) (bool, error) {
	if sub.Resync {
		fmt.Fprintf(o.IO.Err, "more than %d events missed, or an id this stream never had: resuming after the newest, %d\n", stream.ReplayMax, sub.Cursor)
	}
	for _, e := range sub.Backlog {
		if stop, err := print(e); err != nil || stop {
			return true, err
		}
	}
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case <-timeout:
			return true, nil
		case <-sub.Done():
			if resumable(sub.Err()) {
				return false, nil
			}
			return true, sub.Err()
		case e := <-sub.C():
			if stop, err := print(e); err != nil || stop {
				return true, err
			}
		}
	}
}

// resumable: the subscription ended for a reason its reader resumes from
// by subscribing again after the last id it printed.
func resumable(err error) bool {
	return err == stream.ErrSlow || err == stream.ErrReset
}
