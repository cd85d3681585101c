package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/leases"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/replicas"
)

func keyOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The watch keys leave out what moves on its own (heartbeats, renewals,
// keep-alives, ages) and keep everything else a list shows.
func TestWatchKeysLeaveOutOnlyWhatMovesOnItsOwn(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	later := t0.Add(5 * time.Second)
	off := 0.002

	rep := replicas.Info{ID: "web-1", State: replicas.StateReady, StartedAt: t0, HeartbeatAt: t0, HeartbeatAge: time.Second, Uptime: time.Minute, Live: true}
	beat := rep
	beat.HeartbeatAt, beat.HeartbeatAge, beat.Uptime, beat.ClockOffset = later, 0, time.Minute+5*time.Second, &off
	lc := map[string]int{"web-1": 2}
	base := keyOf(t, replicasKey([]replicas.Info{rep}, lc))
	if got := keyOf(t, replicasKey([]replicas.Info{beat}, lc)); got != base {
		t.Errorf("a heartbeat changed the replicas key:\n%s\n%s", base, got)
	}
	for name, change := range map[string]func(*replicas.Info){
		"state":   func(in *replicas.Info) { in.State = replicas.StateDraining },
		"gone":    func(in *replicas.Info) { in.Gone, in.Live = true, false },
		"runs":    func(in *replicas.Info) { in.RunsInFlight = 1 },
		"version": func(in *replicas.Info) { in.Version = "v2" },
	} {
		in := rep
		change(&in)
		if keyOf(t, replicasKey([]replicas.Info{in}, lc)) == base {
			t.Errorf("a change of %s left the replicas key as it was", name)
		}
	}
	if keyOf(t, replicasKey([]replicas.Info{rep}, map[string]int{"web-1": 3})) == base {
		t.Error("a change of the lease count left the replicas key as it was")
	}

	lk := locks.Info{Name: "report", LockedBy: "web-1", LockedAt: t0, LockUntil: t0.Add(time.Minute), State: locks.StateHeld, HolderState: locks.HolderLive, Remaining: time.Minute}
	kept := lk
	kept.LockUntil, kept.Remaining = t0.Add(2*time.Minute), 2*time.Minute
	if keyOf(t, locksKey([]locks.Info{lk})) != keyOf(t, locksKey([]locks.Info{kept})) {
		t.Error("a keep-alive changed the locks key")
	}
	freed := lk
	freed.State = locks.StateFree
	if keyOf(t, locksKey([]locks.Info{lk})) == keyOf(t, locksKey([]locks.Info{freed})) {
		t.Error("a release left the locks key as it was")
	}
	retaken := lk
	retaken.LockedAt = later
	if keyOf(t, locksKey([]locks.Info{lk})) == keyOf(t, locksKey([]locks.Info{retaken})) {
		t.Error("a new locked_at left the locks key as it was")
	}

	age, age2 := time.Second, 4*time.Second
	ls := leases.Info{Cluster: "c1", Owner: "web-1", OwnerState: leases.OwnerLive, RenewedAt: &t0, RenewedAge: &age, Generation: 3, State: leases.StateOK}
	renewed := ls
	renewed.RenewedAt, renewed.RenewedAge = &later, &age2
	if keyOf(t, leasesKey([]leases.Info{ls})) != keyOf(t, leasesKey([]leases.Info{renewed})) {
		t.Error("a renewal changed the leases key")
	}
	moved := ls
	moved.Generation, moved.Owner = 4, "web-2"
	if keyOf(t, leasesKey([]leases.Info{ls})) == keyOf(t, leasesKey([]leases.Info{moved})) {
		t.Error("a handover left the leases key as it was")
	}

	v := jobstore.View{ID: "report", Health: jobs.HealthOK}
	row := jobstore.ReplicaStatus{Status: jobs.Status{JobID: "report", ReplicaID: "web-1", UpdatedAt: t0}, Live: true}
	flushed := row
	flushed.UpdatedAt = later
	if keyOf(t, jobDetailKey([]jobstore.View{v}, []jobstore.ReplicaStatus{row}, nil)) != keyOf(t, jobDetailKey([]jobstore.View{v}, []jobstore.ReplicaStatus{flushed}, nil)) {
		t.Error("a flush with nothing new changed the jobs status key")
	}
	paused := row
	paused.Paused = true
	if keyOf(t, jobDetailKey([]jobstore.View{v}, []jobstore.ReplicaStatus{row}, nil)) == keyOf(t, jobDetailKey([]jobstore.View{v}, []jobstore.ReplicaStatus{paused}, nil)) {
		t.Error("a pause left the jobs status key as it was")
	}
}
