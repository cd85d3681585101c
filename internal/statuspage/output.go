package statuspage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
)

// OutputPath is the route of a run's output (the page links to it); {id}
// is a job id, or job@cluster for one cluster's runs of a clusters: owned
// job.
const OutputPath = "/v1/jobs/{id}/output"

// outputHref is the page's link to a job's output (seq 0: the last run
// that ended). Relative, as the page's other URLs, so that a proxy may
// serve the page under a path prefix (the page is only ever at /).
func outputHref(id string, seq int64) string {
	href := "v1/jobs/" + id + "/output"
	if seq != 0 {
		href += "?seq=" + strconv.FormatInt(seq, 10)
	}
	return href
}

// Output serves OutputPath: the stored output tail of a job's last run
// that ended, or of run ?seq=N, as text/plain, exactly as the replica
// stored it (scrubbed of secrets before it was written), which is what
// `studioctl jobs output` prints. 404 names what is missing: the job, the
// run, or its output; 400 a malformed id or seq. It reads only.
func (h *Handler) Output() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Cache-Control", "no-store")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			hd.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed: the status page is read-only", http.StatusMethodNotAllowed)
			return
		}
		rq, err := outputQuery(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), snapshotTimeout)
		defer cancel()
		run, err := h.readRun(ctx, rq)
		if err == nil && run.OutputTail == "" {
			err = jobstore.NoOutputError(run)
		}
		switch {
		case errors.Is(err, jobstore.ErrUnknownJob), errors.Is(err, jobstore.ErrUnknownRun), errors.Is(err, jobstore.ErrNoOutput):
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		case err != nil:
			h.o.Logger.Warn("status page: read run output failed", "error", err)
			if h.o.Scrub != nil {
				err = h.o.Scrub(err)
			}
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		hd.Set("Content-Type", "text/plain; charset=utf-8")
		hd.Set("Content-Length", strconv.Itoa(len(run.OutputTail)))
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			io.WriteString(w, run.OutputTail)
		}
	})
}

// outputQuery reads the job (job or job@cluster) and ?seq of a request.
func outputQuery(r *http.Request) (jobstore.RunQuery, error) {
	id := r.PathValue("id")
	k, hasCluster := jobs.ParseDutyKey(id)
	job, cluster := k.Job, k.Cluster
	if err := jobs.ValidateID(job); err != nil {
		return jobstore.RunQuery{}, fmt.Errorf("job id: %v", err)
	}
	if hasCluster && cluster == "" {
		return jobstore.RunQuery{}, fmt.Errorf("job id %q: the cluster after @ is empty", id)
	}
	rq := jobstore.RunQuery{Job: job, Cluster: cluster, Ended: true}
	if s := r.URL.Query().Get("seq"); s != "" {
		seq, err := strconv.ParseInt(s, 10, 64)
		if err != nil || seq < 1 {
			return jobstore.RunQuery{}, fmt.Errorf("seq: %q is not a run's sequence number (a positive integer)", s)
		}
		rq.Seq, rq.Ended = seq, false
	}
	return rq, nil
}

// readRun reads one run in a READ ONLY transaction, as the page reads.
func (h *Handler) readRun(ctx context.Context, rq jobstore.RunQuery) (jobs.Run, error) {
	tx, err := h.o.DB.Begin(ctx)
	if err != nil {
		return jobs.Run{}, fmt.Errorf("read run: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SET TRANSACTION READ ONLY`); err != nil {
		return jobs.Run{}, fmt.Errorf("read run: %w", err)
	}
	return jobstore.RunOf(ctx, tx, rq)
}
