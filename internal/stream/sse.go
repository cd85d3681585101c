package stream

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// writeTimeout bounds each write to a client, so a client that stops
// reading cannot hold its handler forever.
const writeTimeout = 10 * time.Second

// retryDown is the reconnect time a client is given while the database
// cannot be read.
const retryDown = 5 * time.Second

// Cursor reads where a client resumes: the Last-Event-ID header (which
// EventSource sends on every reconnect) wins over ?since=; both mean
// "after this id". Neither: from now.
func Cursor(r *http.Request) (after int64, fromNow bool, err error) {
	raw, what := r.Header.Get("Last-Event-ID"), "Last-Event-ID"
	if raw == "" {
		raw, what = r.URL.Query().Get("since"), "since"
	}
	if raw == "" {
		return 0, true, nil
	}
	n, perr := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
	if perr != nil || n < 0 {
		return 0, false, fmt.Errorf("%s: must be an event id (a non-negative integer), got %s", what, echo(raw))
	}
	return n, false, nil
}

// echoMax is how much of a bad value an error quotes back.
const echoMax = 40

// echo quotes at most echoMax bytes of a client's value, and says how
// long the rest was: an error never sends back what a client sent at
// length.
func echo(raw string) string {
	if len(raw) <= echoMax {
		return strconv.Quote(raw)
	}
	cut := echoMax
	for cut > 0 && !utf8.RuneStart(raw[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(raw[:cut]), len(raw))
}

// ServeHTTP is GET /v1/events: server-sent events (docs/events.md).
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodHead:
		// A probe: the headers, and no subscription that would wait for
		// the prober to hang up.
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		return
	default:
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed: the event stream is read with GET", http.StatusMethodNotAllowed)
		return
	}
	after, fromNow, err := Cursor(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// The cap on clients counts those that replay too: each holds a
	// buffer, a goroutine and a connection.
	if n := h.clients.Add(1); n > int64(h.maxClients()) {
		h.clients.Add(-1)
		h.refused.Add(1)
		w.Header().Set("Retry-After", "5")
		http.Error(w, fmt.Sprintf("this replica serves at most %d event stream clients: try another replica, or again later", h.maxClients()), http.StatusServiceUnavailable)
		return
	}
	defer h.clients.Add(-1)
	rc := http.NewResponseController(w)
	sub, err := h.Subscribe(r.Context(), after, fromNow)
	if err != nil {
		if errors.Is(err, ErrClosed) {
			w.Header().Set("Retry-After", "1")
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		// Not a 503: EventSource gives up on any status but 200, so a
		// database blip would end every plain client that reconnected
		// then. A stream that says why and ends makes it reconnect after
		// the retry time, with its Last-Event-ID.
		h.log.Warn("event stream: subscribe", "error", err)
		hd := w.Header()
		hd.Set("Content-Type", "text/event-stream; charset=utf-8")
		hd.Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, "retry: %d\n: the event stream cannot read the database now; reconnect in %s\n\n", retryDown.Milliseconds(), retryDown)
		_ = rc.Flush()
		return
	}
	defer sub.Close()
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)

	send := func(write func(io.Writer) error) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if err := write(w); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// EventSource waits retry ms before it reconnects.
	if !send(func(w io.Writer) error { _, err := io.WriteString(w, "retry: 1000\n: connected\n\n"); return err }) {
		return
	}
	if sub.Resync {
		if !send(func(w io.Writer) error {
			return writeEvent(w, sub.Cursor, EventResync, fmt.Appendf(nil, `{"last_id":%d,"reason":"more than %d events missed, or an unknown id: reload everything"}`, sub.Cursor, ReplayMax))
		}) {
			return
		}
	}
	for _, e := range sub.Backlog {
		if !send(func(w io.Writer) error { return writeEvent(w, e.ID, e.Name, e.Data) }) {
			return
		}
	}
	sub.Backlog = nil
	beat := time.NewTicker(Heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case e := <-sub.C():
			if !send(func(w io.Writer) error { return writeEvent(w, e.ID, e.Name, e.Data) }) {
				return
			}
		case <-beat.C:
			if !send(func(w io.Writer) error { _, err := io.WriteString(w, ": heartbeat\n\n"); return err }) {
				return
			}
		case <-sub.Done():
			// Events handed over before the end still go out, in order.
			for {
				select {
				case e := <-sub.C():
					if !send(func(w io.Writer) error { return writeEvent(w, e.ID, e.Name, e.Data) }) {
						return
					}
					continue
				default:
				}
				break
			}
			if errors.Is(sub.Err(), ErrClosed) {
				send(func(w io.Writer) error {
					return writeEvent(w, 0, EventReconnect, []byte(`{"reason":"this replica is draining: reconnect"}`))
				})
			}
			return
		}
	}
}

// writeEvent writes one SSE event; id 0 writes no id line. data is one
// JSON object on one line (jsonb's text never holds a raw newline).
func writeEvent(w io.Writer, id int64, name string, data []byte) error {
	var b strings.Builder
	if id > 0 {
		fmt.Fprintf(&b, "id: %d\n", id)
	}
	fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", name, strings.ReplaceAll(string(data), "\n", " "))
	_, err := io.WriteString(w, b.String())
	return err
}
