package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
)

// The cases of jobs why that the golden script (jobs_why.txtar) does not
// reach: what each says, and the command it ends with.
func TestJobsWhyTellsEveryCase(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	ptr := func(v time.Time) *time.Time { return &v }
	seq, late, known := int64(7), 0.25, true
	base := jobstore.OccurrenceView{JobID: "sync", NominalAt: at("2026-11-30T02:00:00Z"), ReplicaID: "web-1", Count: 1}
	with := func(f func(*jobstore.OccurrenceView)) jobstore.OccurrenceView { o := base; f(&o); return o }
	web1 := jobstore.ReplicaTrace{ID: "web-1", State: "stopped", Hosts: true, StartedAt: at("2026-11-30T01:00:00Z"),
		HeartbeatAt: at("2026-11-30T02:00:10Z"), StoppedAt: ptr(at("2026-11-30T02:00:10Z"))}
	live := jobstore.ReplicaTrace{ID: "web-2", State: "ready", Live: true, Hosts: true, StartedAt: at("2026-11-30T01:00:00Z"), HeartbeatAt: at("2026-11-30T06:59:58Z")}
	tests := []struct {
		name       string
		o          jobstore.OccurrenceView
		ev         jobstore.OccurrenceEvidence
		want, hint string
	}{
		{"a run still going says so", with(func(o *jobstore.OccurrenceView) {
			o.Outcome, o.Seq, o.RunOutcome, o.LatenessSeconds = jobs.OccurrenceRan, &seq, "running", &late
		}), jobstore.OccurrenceEvidence{}, "ran on web-1 as run 7, started 250ms late; it is still running.", "studioctl jobs status sync"},
		{"an interrupted run names its replica's stop", with(func(o *jobstore.OccurrenceView) {
			o.Outcome, o.Reason, o.Seq, o.RunOutcome = jobs.OccurrenceMissed, jobs.ReasonLost, &seq, "interrupted"
		}), jobstore.OccurrenceEvidence{Replicas: []jobstore.ReplicaTrace{web1}},
			"was missed: run 7 started on web-1 and was interrupted before it ended: its replica stopped or died; web-1 stopped at 2026-11-30T02:00:10Z.", "studioctl replicas list"},
		{"a lost run of a replica forgotten since", with(func(o *jobstore.OccurrenceView) {
			o.Outcome, o.Reason, o.Seq, o.RunOutcome = jobs.OccurrenceMissed, jobs.ReasonLost, &seq, "running"
		}), jobstore.OccurrenceEvidence{}, "web-1 is no longer registered.", "studioctl replicas list"},
		{"a holder that is a live replica", with(func(o *jobstore.OccurrenceView) {
			o.Outcome, o.Reason, o.Holder, o.HolderKnown = jobs.OccurrenceSkipped, jobs.ReasonHeldElsewhere, &live.ID, &known
		}), jobstore.OccurrenceEvidence{Replicas: []jobstore.ReplicaTrace{live}},
			"its lock was held by web-2, a known replica that is live (last heartbeat 2026-11-30T06:59:58Z).", "studioctl locks show sync"},
		{"an instance job names its scope; an overrun", with(func(o *jobstore.OccurrenceView) {
			o.ScopeKey, o.Outcome, o.Reason = "web-1", jobs.OccurrenceSkipped, jobs.ReasonOverrun
		}), jobstore.OccurrenceEvidence{}, "Job sync (scope web-1), due 2026-11-30T02:00:00.000Z, was skipped (seen by web-1): the previous run was still going", "studioctl jobs history sync"},
		{"an invalid schedule", with(func(o *jobstore.OccurrenceView) {
			o.Outcome, o.Reason = jobs.OccurrenceSkipped, jobs.ReasonInvalidSchedule
		}), jobstore.OccurrenceEvidence{}, "its schedule override does not parse.", "studioctl jobs set sync --clear"},
		{"a start deadline", with(func(o *jobstore.OccurrenceView) {
			o.Outcome, o.Reason = jobs.OccurrenceSkipped, jobs.ReasonDeadline
		}), jobstore.OccurrenceEvidence{}, "it could not start before its start deadline.", "studioctl jobs history sync"},
		{"a pause without its audit row names the setting's author", with(func(o *jobstore.OccurrenceView) {
			o.Outcome, o.Reason, o.PausedBy = jobs.OccurrenceSkipped, jobs.ReasonPaused, &live.State
		}), jobstore.OccurrenceEvidence{StillPaused: true}, "was skipped (seen by web-1): it was paused by ready. It is still paused.", "studioctl jobs resume sync"},
		{"one due time missed, a replica live then that does not host the job", with(func(o *jobstore.OccurrenceView) {
			o.Outcome, o.Reason = jobs.OccurrenceMissed, jobs.ReasonDown
		}), jobstore.OccurrenceEvidence{Replicas: []jobstore.ReplicaTrace{{ID: "web-3", State: "ready", StartedAt: at("2026-11-30T01:00:00Z"), HeartbeatAt: at("2026-11-30T02:00:05Z")}}},
			"Job sync, due 2026-11-30T02:00:00.000Z, was missed: no live replica hosted it then. Replicas: web-3 was live (started 2026-11-30T01:00:00Z) (does not host the job).", "studioctl replicas list"},
		{"a replica killed just before the due time was gone then, though its heartbeat is within 15 s", with(func(o *jobstore.OccurrenceView) {
			o.Outcome, o.Reason = jobs.OccurrenceMissed, jobs.ReasonDown
		}), jobstore.OccurrenceEvidence{Replicas: []jobstore.ReplicaTrace{{ID: "web-2", State: "ready", Hosts: true, StartedAt: at("2026-11-30T01:00:00Z"), HeartbeatAt: at("2026-11-30T01:59:56Z")}}},
			"Replicas: web-2 was gone (last heartbeat 2026-11-30T01:59:56Z, before the due time; no stop recorded).", "studioctl replicas list"},
		{"no replica registered", with(func(o *jobstore.OccurrenceView) {
			o.Outcome, o.Reason, o.Count, o.LastNominalAt = jobs.OccurrenceMissed, jobs.ReasonDown, 3, ptr(at("2026-11-30T02:20:00Z"))
		}), jobstore.OccurrenceEvidence{}, "Job sync missed 3 due times from 2026-11-30T02:00:00.000Z to 2026-11-30T02:20:00.000Z: no live replica hosted it then. No replica is registered.", "studioctl replicas list"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			summary, hint := explainOccurrence(tc.o, tc.ev)
			if !strings.Contains(summary, tc.want) || hint != tc.hint {
				t.Errorf("got %q, hint %q\nwant it to hold %q, hint %q", summary, hint, tc.want, tc.hint)
			}
		})
	}
	// Many replicas: those hosting the job, at most four named.
	var many []jobstore.ReplicaTrace
	for i := range 7 {
		many = append(many, jobstore.ReplicaTrace{ID: fmt.Sprintf("web-%d", i), State: "stopped", Hosts: i < 6,
			StartedAt: at("2026-11-30T01:00:00Z"), HeartbeatAt: at("2026-11-30T01:30:00Z"), StoppedAt: ptr(at("2026-11-30T01:30:00Z"))})
	}
	summary, _ := explainOccurrence(with(func(o *jobstore.OccurrenceView) { o.Outcome, o.Reason = jobs.OccurrenceMissed, jobs.ReasonDown }),
		jobstore.OccurrenceEvidence{Replicas: many})
	if !strings.Contains(summary, "web-3 stopped at 2026-11-30T01:30:00Z; 2 more.") || strings.Contains(summary, "web-6") {
		t.Errorf("many replicas: %s", summary)
	}
}

// --at: how far the occurrence told is from the time asked about, from
// its nearest due time; 0 on it or inside its stretch.
func TestJobsWhyAtOffset(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)
	last := t0.Add(20 * time.Minute)
	one := jobstore.OccurrenceView{NominalAt: t0, Count: 1}
	stretch := jobstore.OccurrenceView{NominalAt: t0, Count: 3, LastNominalAt: &last}
	for _, c := range []struct {
		o    jobstore.OccurrenceView
		at   time.Time
		want time.Duration
		text string
	}{
		{one, t0, 0, ""},
		{one, t0.Add(-90 * time.Second), 90 * time.Second, "the nearest due time is 1m30s later. "},
		{one, t0.Add(250 * time.Millisecond), -250 * time.Millisecond, "the nearest due time is 250ms earlier. "},
		{stretch, t0.Add(7 * time.Minute), 0, ""},
		{stretch, last.Add(time.Minute), -time.Minute, "the nearest due time is 1m0s earlier. "},
	} {
		d := atOffset(c.o, c.at)
		text := offsetText(d, c.at)
		if d != c.want || !strings.HasSuffix(text, c.text) || (c.text == "") != (text == "") {
			t.Errorf("at %s: %s %q, want %s %q", c.at, d, text, c.want, c.text)
		}
	}
}
