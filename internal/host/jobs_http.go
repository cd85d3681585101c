package host

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/studioctl/studioctl/internal/jobstore"
)

// occurrencesReadTimeout bounds the database read of /v1/jobs: the
// occurrence summaries (the rest is the replica's own memory).
const occurrencesReadTimeout = 2 * time.Second

// serveJobs is /v1/jobs: this replica's job status as JSON, in the shape of
// `studioctl jobs status -o json`. last_occurrence, skipped_24h and
// missed_24h are the job's across the installation, read from the
// database; when it cannot be read they are null and 0, and the rest is
// still served. So are paused_by, paused_reason and paused_until.
func (h *Host) serveJobs(w http.ResponseWriter, r *http.Request) {
	snap := h.runner.Snapshot()
	rows := make([]jobstore.ReplicaStatus, 0, len(snap))
	for _, st := range snap {
		rows = append(rows, jobstore.ReplicaStatus{Status: st, Live: true})
	}
	views := jobstore.Merge(rows, h.o.clock().Now())
	if h.pool != nil {
		ctx, cancel := context.WithTimeout(r.Context(), occurrencesReadTimeout)
		if err := jobstore.AddOccurrenceSummaries(ctx, h.pool, views); err != nil {
			for i := range views {
				views[i].Occurrences = nil
			}
		}
		_ = jobstore.AddDrift(ctx, h.pool, views) // drift: the live replicas disagree (false when unread)
		// The pause's author, reason and end (null when unread).
		if err := jobstore.AddPauses(ctx, h.pool, views, h.o.clock().Now()); err != nil {
			for i := range views {
				views[i].Pause = nil
			}
		}
		cancel()
	}
	out := make([]jobstore.ViewJSON, 0, len(views))
	for _, v := range views {
		out = append(out, v.JSON())
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(out)
}
