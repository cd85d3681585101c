package watch_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
	"github.com/studioctl/studioctl/internal/watch"
)

// The notifier turns its first connection into a resync wake-up, signals
// and run seqs into wake-ups (frames not), and a lost connection into one
// notice, a reconnection and a resync wake-up.
func TestNotifierWakesOnMessagesAndTellsALostBusOnce(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	cfg, err := db.ParseConnConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	w := watch.NewWakes()
	notices := make(chan string, 10)
	n := watch.Listen(watch.ListenOptions{
		Config: cfg, ConnString: url, Wakes: w, Notice: func(s string) { notices <- s },
		Lost: "lost", Back: "back",
	})
	defer n.Stop()
	deadline := time.Now().Add(waitFor)
	for !n.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("the notifier never connected")
		}
		time.Sleep(10 * time.Millisecond) // a poll interval inside a deadline
	}
	take := func(what string) watch.Wake {
		t.Helper()
		select {
		case <-w.C():
			return w.Take()
		case <-time.After(waitFor):
			t.Fatalf("no wake-up for %s", what)
			return watch.Wake{}
		}
	}
	send := func(m bus.Message) {
		t.Helper()
		if err := bus.Notify(ctx, pool, m); err != nil {
			t.Fatal(err)
		}
	}

	// The first connection asks for one more read: what changed between
	// the watch's first read and its LISTEN had no message (a loaded CI
	// run lost such a change, jobs_occurrences.txtar).
	if got := take("the first connection"); got != (watch.Wake{Resync: true}) {
		t.Fatalf("wake-up after the first connection = %+v, want a resync only", got)
	}

	send(bus.Frame("runs", "1", "x", nil))
	send(bus.Seqs(7))
	if got := take("seqs"); got != (watch.Wake{Message: true}) {
		t.Fatalf("wake-up of a frame and a seqs batch = %+v, want a message only", got)
	}
	send(bus.Signal(bus.KindLockReleased, "sweep"))
	if got := take("a signal"); got != (watch.Wake{Message: true, Signal: true}) {
		t.Fatalf("wake-up of a signal = %+v", got)
	}

	var killed bool
	if err := pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) = 1 FROM pg_stat_activity
WHERE datname = current_database() AND query = 'LISTEN studio'`).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the listener: %v, %v", killed, err)
	}
	if got := take("the reconnection"); !got.Resync {
		t.Fatalf("wake-up after a reconnection = %+v, want a resync", got)
	}
	var told []string
	for len(told) < 2 {
		select {
		case s := <-notices:
			told = append(told, s)
		case <-time.After(waitFor):
			t.Fatalf("notices %q, want lost and back", told)
		}
	}
	if strings.Join(told, ",") != "lost,back" {
		t.Fatalf("notices %q, want lost, then back", told)
	}
	send(bus.Signal(bus.KindReplicaState, "web-1"))
	if got := take("a signal after the reconnection"); !got.Signal {
		t.Fatalf("wake-up = %+v", got)
	}
	select {
	case s := <-notices:
		t.Fatalf("a second notice %q", s)
	case <-time.After(1500 * time.Millisecond): // more than a check of the connection
	}
}
