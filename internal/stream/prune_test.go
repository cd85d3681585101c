package stream

import (
	"context"
	"testing"
	"time"
)

// Housekeeping deletes events older than 24 hours, so a quiet
// installation's table can be empty while the hub still remembers the
// last id it handed out. A new client must still be served (it used to
// spin in Subscribe, re-reading an empty table until its request ended),
// and must get the next event.
func TestSubscribeAfterThePruneEmptiedTheTable(t *testing.T) {
	t.Parallel()
	pool, _ := openPool(t)
	h := startHub(t, pool)
	ctx := context.Background()
	first, err := h.Subscribe(ctx, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	insertRuns(t, pool, "a", 3)
	recv(t, h, first, 3)
	first.Close()
	mustExec(t, pool, `DELETE FROM studio_event`) // the prune of a quiet day

	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := h.Subscribe(sctx, 0, true)
	if err != nil {
		t.Fatalf("subscribe after the table was emptied: %v", err)
	}
	defer s.Close()
	insertRuns(t, pool, "b", 1)
	if got := recv(t, h, s, 1); data(t, got[0])["job_id"] != "b" {
		t.Fatalf("after the prune: %v", got)
	}
}

// A client whose last id is older than what housekeeping kept missed the
// pruned events: it must get a resync, not a replay that starts after a
// silent gap.
func TestReplayPastPrunedEventsIsAResync(t *testing.T) {
	t.Parallel()
	pool, _ := openPool(t)
	h := startHub(t, pool)
	insertRuns(t, pool, "a", 10)
	all := events(t, pool, 0)
	mustExec(t, pool, `DELETE FROM studio_event WHERE id <= $1`, all[5].ID) // pruned
	s, err := h.Subscribe(context.Background(), all[2].ID, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Resync {
		t.Fatalf("resuming after %d when %d..%d were pruned: a replay of %v, want a resync", all[2].ID, all[3].ID, all[5].ID, ids(s.Backlog))
	}
	// 0 asks for everything kept.
	s0, err := h.Subscribe(context.Background(), 0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s0.Close()
	if s0.Resync || len(s0.Backlog) != 4 {
		t.Fatalf("since 0: resync %v, backlog %v, want the 4 kept events", s0.Resync, ids(s0.Backlog))
	}
	// A client that is not behind the prune still replays.
	s2, err := h.Subscribe(context.Background(), all[6].ID, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.Resync || len(s2.Backlog) != 3 {
		t.Fatalf("resuming after %d: resync %v, backlog %v, want the 3 kept events", all[6].ID, s2.Resync, ids(s2.Backlog))
	}
}

// The table was recreated or restored from a backup, so ids start lower
// than the hub's last one. The hub must not wait for ids past its old
// last: its clients are ended (they reconnect and get a resync) and a new
// client gets the new events.
func TestHubFollowsATableWhoseIdsWentBack(t *testing.T) {
	t.Parallel()
	pool, _ := openPool(t)
	h := startHub(t, pool)
	ctx := context.Background()
	old, err := h.Subscribe(ctx, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	insertRuns(t, pool, "a", 5)
	recv(t, h, old, 5)
	mustExec(t, pool, `TRUNCATE studio_event RESTART IDENTITY`)
	insertRuns(t, pool, "b", 1)
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case e := <-old.C():
			t.Fatalf("an old client got %d after the ids went back; want its stream ended", e.ID)
		case <-old.Done():
			done = true
		case <-tick.C:
			h.Wake()
		case <-deadline:
			t.Fatal("the old client was never ended after the ids went back")
		}
	}
	s, err := h.Subscribe(ctx, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	insertRuns(t, pool, "c", 1)
	if got := recv(t, h, s, 1); data(t, got[0])["job_id"] != "c" {
		t.Fatalf("after the ids went back: %v", got)
	}
}
