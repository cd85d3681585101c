package host

import (
	"encoding/json"
	"net/http"

	"github.com/studioctl/studioctl/internal/jobstore"
)

// serveJobs is /v1/jobs: this replica's job status as JSON, in the shape of
// `studioctl jobs status -o json`.
func (h *Host) serveJobs(w http.ResponseWriter, r *http.Request) {
	snap := h.runner.Snapshot()
	rows := make([]jobstore.ReplicaStatus, 0, len(snap))
	for _, st := range snap {
		rows = append(rows, jobstore.ReplicaStatus{Status: st, Live: true})
	}
	views := jobstore.Merge(rows, h.o.clock().Now())
	out := make([]jobstore.ViewJSON, 0, len(views))
	for _, v := range views {
		out = append(out, v.JSON())
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(out)
}
