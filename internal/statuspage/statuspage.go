// Package statuspage is the read-only status page a replica serves at `/`
// (issue 12, docs/status-page.md): the replicas, jobs, latest runs, leases
// and locks of the whole installation, read from the database in one
// read-only snapshot and rendered on the server with html/template, then
// kept live by a small embedded script that listens to /v1/events and
// swaps in a freshly rendered fragment. It writes nothing.
package statuspage

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/studioctl/studioctl/internal/locks"
)

// Limits keep the page bounded at any installation size; what is left out
// is counted on the page.
const (
	// MaxRuns is how many of the latest runs the page lists.
	MaxRuns = 25
	// MaxRows is how many rows any other section lists.
	MaxRows = 500
	// snapshotTimeout bounds the read of one page.
	snapshotTimeout = 5 * time.Second
	// FragmentMain is the ?fragment= value that returns only the <main>
	// element, which the live script swaps in.
	FragmentMain = "main"
)

// Querier is the part of a pool the page reads through. It only reads:
// every read runs in a READ ONLY transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Options configure a Handler.
type Options struct {
	DB        Querier     // required: the replica's pool
	LockTable locks.Table // zero: ShedLock's default table
	ReplicaID string      // the replica serving the page, shown in the header
	Logger    *slog.Logger
	// Scrub, when set, cleans a database error before it is shown (the host
	// passes one that removes the connection string's secrets).
	Scrub func(error) error
}

// Handler serves the page. It is safe for concurrent use.
type Handler struct {
	o    Options
	page *template.Template
	csp  string

	// Requests share snapshots: one that started after a request arrived is
	// as new as that request asks, so a burst of requests (every open page
	// refetching on one event) reads the database once or twice, not once
	// per page.
	mu        sync.Mutex // held while a snapshot is read
	last      *view
	lastStart time.Time
}

//go:embed page.html
var pageHTML string

//go:embed page.css
var pageCSS string

//go:embed live.js
var liveJS string

// page is parsed once; a template that does not parse is a build defect,
// which every test of this package finds.
var page = template.Must(template.New("statuspage").Funcs(funcs).Parse(pageHTML))

// New returns the page handler. The lock table is validated when the page
// is read, so a bad one shows on the page rather than failing the replica.
func New(o Options) *Handler {
	if o.LockTable == (locks.Table{}) {
		o.LockTable = locks.DefaultTable()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	// The only script and style that may run are the embedded ones, by
	// hash: even text that escaped escaping could not run script.
	csp := "default-src 'none'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; " +
		"style-src '" + hash(pageCSS) + "'; script-src '" + hash(liveJS) + "'"
	return &Handler{o: o, page: page, csp: csp}
}

// snapshot returns a snapshot read after the call began: the last one if
// it started since, else a new one.
func (h *Handler) snapshot(ctx context.Context) (*view, error) {
	arrived := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last != nil && !h.lastStart.Before(arrived) {
		v := *h.last
		return &v, nil
	}
	start := time.Now()
	v, err := h.load(ctx)
	if err != nil {
		return nil, err
	}
	h.last, h.lastStart = v, start
	cp := *v
	return &cp, nil
}

func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}

// ServeHTTP answers GET and HEAD of the page (?fragment=main: only its
// <main> element); any other method is refused with 405.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed: the status page is read-only", http.StatusMethodNotAllowed)
		return
	}
	frag := r.URL.Query().Get("fragment")
	if frag != "" && frag != FragmentMain {
		http.Error(w, fmt.Sprintf("unknown fragment %q (want %q)", frag, FragmentMain), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), snapshotTimeout)
	defer cancel()
	v, err := h.snapshot(ctx)
	status := http.StatusOK
	if err != nil {
		h.o.Logger.Warn("status page: read failed", "error", err)
		if h.o.Scrub != nil {
			err = h.o.Scrub(err)
		}
		v = &view{Err: err.Error()}
		status = http.StatusServiceUnavailable
	}
	v.ReplicaID, v.CSS, v.Script = h.o.ReplicaID, template.CSS(pageCSS), template.JS(liveJS)
	name := "page"
	if frag != "" {
		name = "main"
	}
	var buf bytes.Buffer
	if err := h.page.ExecuteTemplate(&buf, name, v); err != nil {
		h.o.Logger.Error("status page: render failed", "error", err)
		http.Error(w, "render status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Content-Security-Policy", h.csp)
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		w.Write(visible(buf.Bytes()))
	}
}
