package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/output"
	"github.com/studioctl/studioctl/internal/watch"
)

// watchFlags are the --watch flags every list command shares.
type watchFlags struct {
	Watch bool
	// Poll is the fallback read interval (hidden --watch-poll, for tests).
	Poll time.Duration
	// Trace prints every read and whether it was drawn to stderr (hidden
	// --watch-trace, for tests).
	Trace bool
}

// add declares --watch on cmd, and the hidden --watch-poll.
func (w *watchFlags) add(cmd *cobra.Command) {
	cmd.Flags().BoolVarP(&w.Watch, "watch", "w", false, "redraw whenever what is shown changes, until interrupted (docs/watch.md)")
	cmd.Flags().DurationVar(&w.Poll, "watch-poll", watch.DefaultPoll, "with --watch, the fallback database read interval")
	cmd.Flags().BoolVar(&w.Trace, "watch-trace", false, "with --watch, tell every read on stderr")
	_ = cmd.Flags().MarkHidden("watch-poll")
	_ = cmd.Flags().MarkHidden("watch-trace")
}

// listView is one read of a list: how to print it, and what it shows
// minus what moves on its own (ages, heartbeat and renewal times), which
// --watch compares to decide whether to redraw.
type listView struct {
	print func(*output.Printer) error
	key   any
}

// watchList prints a list once, or with w.Watch until ctx is done: again
// whenever what it shows changes (internal/watch: bus wake-ups, a follow-up
// read after a signal, a fallback poll). load reads everything before
// anything is printed. title names the view on a terminal.
//
// On a terminal the view is redrawn in place under a header line; piped,
// every change prints a timestamp line (RFC 3339, UTC) and the whole
// table; -o json prints one compact document per line; -o yaml one
// document per change, each opened by "---".
func watchList(ctx context.Context, d deps, w watchFlags, title string, load func(context.Context) (listView, error)) error {
	p := d.Printer()
	if !w.Watch {
		v, err := load(ctx)
		if err != nil {
			return err
		}
		return v.print(p)
	}
	if w.Poll <= 0 {
		return usageErrorf("--watch-poll: must be positive, got %s", w.Poll)
	}
	// The bus needs a session of its own: database.listen_url's when set.
	pool, err := d.SessionDB(ctx)
	if err != nil {
		return err
	}
	var errMu sync.Mutex
	notice := func(s string) {
		errMu.Lock()
		defer errMu.Unlock()
		fmt.Fprintln(d.IO.Err, s)
	}
	wakes := watch.NewWakes()
	pc := pool.Config()
	n := watch.Listen(watch.ListenOptions{
		Config: pc.ConnConfig, ConnString: pc.ConnString(), Wakes: wakes, Notice: notice,
		Lost: fmt.Sprintf("watch: lost the bus connection; reading the database every %s until it is back", w.Poll),
		Back: "watch: bus connection back; redrawing on every change again",
	})
	defer n.Stop()
	var trace func(string, bool)
	if w.Trace {
		trace = func(why string, drawn bool) {
			notice(fmt.Sprintf("watch: read (%s): %s", why, map[bool]string{true: "changed, drawn", false: "unchanged"}[drawn]))
		}
	}
	return watch.Loop(ctx, watch.Options{
		Wakes: wakes, Poll: w.Poll, Notice: notice, Trace: trace,
		Load: func(ctx context.Context) (watch.View, error) {
			v, err := load(ctx)
			if err != nil {
				return watch.View{}, err
			}
			key, err := json.Marshal(v.key)
			if err != nil {
				return watch.View{}, err
			}
			return watch.View{Key: string(key), Draw: func() error { return drawWatched(d, p, title, v) }}, nil
		},
	})
}

// drawWatched prints one change of a watched list in the printer's format.
func drawWatched(d deps, p *output.Printer, title string, v listView) error {
	out := d.IO.Out
	switch {
	case p.Format() == output.JSON:
		// One compact document per line, so a reader takes line by line.
		var buf, line bytes.Buffer
		if err := v.print(output.New(&buf, output.JSON, output.Options{})); err != nil {
			return err
		}
		if err := json.Compact(&line, buf.Bytes()); err != nil {
			return err
		}
		line.WriteByte('\n')
		_, err := out.Write(line.Bytes())
		return err
	case p.Format() == output.YAML:
		if _, err := fmt.Fprintln(out, "---"); err != nil {
			return err
		}
		return v.print(p)
	case p.Terminal():
		// Cursor home and clear, then the view under a header line.
		if _, err := fmt.Fprintf(out, "\x1b[H\x1b[2J%s · redrawn on change · %s · Ctrl-C to stop\n\n",
			title, d.Now().UTC().Format("15:04:05Z")); err != nil {
			return err
		}
		return v.print(p)
	default:
		if _, err := fmt.Fprintln(out, d.Now().UTC().Format(time.RFC3339)); err != nil {
			return err
		}
		return v.print(p)
	}
}
