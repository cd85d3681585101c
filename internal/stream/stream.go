// Package stream is the installation's event stream (docs/events.md): the
// rows of studio_event, which triggers write in commit order (migrations/
// 00006_events.sql), fanned out to server-sent-event clients.
//
// A Hub on each replica reads the table after the last id it has whenever
// the bus says a transaction wrote events (a frame of stream "events"), and
// hands each event to every subscriber without ever blocking: a subscriber
// whose buffer is full is dropped, and reconnects with the last id it saw.
// A subscriber that connects with an id first replays what it missed from
// the table, at most ReplayMax events (past that it gets a resync), then
// follows the hub, without a gap or a duplicate.
package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/startstop"
)

// The stream's numbers (issue 12, ADR-0152 §3).
const (
	// ReplayMax is how many missed events a reconnecting client is
	// replayed; past that it gets a resync.
	ReplayMax = 1000
	// Heartbeat is the period of the SSE heartbeat comment.
	Heartbeat = 15 * time.Second
	// ClientBuffer is how many events may wait for one client; a client
	// that falls further behind is dropped (it reconnects and replays).
	ClientBuffer = 256
	// SafetyRead: with clients, the hub reads the table at least this
	// often, in case a notification was lost without a bus reconnect.
	SafetyRead = 10 * time.Second
	// readBatch is how many rows one read of the hub takes.
	readBatch = 500
	// resetCheck: the hub checks at most this often, on a read that found
	// nothing, whether the table's ids went back under it.
	resetCheck = time.Second
	// replayConns is how many subscribes read the table at once. A
	// reconnect storm (a drained replica's clients all arriving, each with
	// its last id) waits its turn here rather than taking every connection
	// of the replica's pool from its locks and flushes.
	replayConns = 2
	// statementTimeout bounds each read.
	statementTimeout = 5 * time.Second
)

// hooks are test seams of a Hub (nil in production).
type hooks struct {
	// afterReplay runs in Subscribe after the replay, before it joins.
	afterReplay func()
}

// MaxData is the most bytes of data an event goes out with (the bus's
// 7,500-byte rule, issue 12): a larger event keeps only its short fields
// (at most maxField bytes each, as JSON), with "truncated": true, and the
// client refetches what it needs (a run's error: jobs history, the page).
// So a run with a megabyte of error is not sent whole to every client and
// into every replay.
const (
	MaxData  = 7500
	maxField = 256
)

// eventColumns reads an event's columns, its data cut to MaxData in the
// database, so that a large one does not even leave it whole.
const eventColumns = `id, at, event, CASE WHEN octet_length(data::text) <= 7500 THEN data
  WHEN jsonb_typeof(data) <> 'object' THEN '{"truncated": true}'::jsonb
  ELSE (SELECT CASE WHEN octet_length(t::text) <= 7500 THEN t ELSE '{"truncated": true}'::jsonb END
        FROM (SELECT coalesce(jsonb_object_agg(k, v), '{}'::jsonb) || '{"truncated": true}'::jsonb AS t
              FROM jsonb_each(data) AS f(k, v) WHERE octet_length(v::text) <= 256) s) END`

// BusStream is the stream name of the bus frames that announce events.
const BusStream = "events"

// SSE event names: the event kinds of studio_event, and the two control
// events of the stream.
const (
	EventRun     = "run"
	EventReplica = "replica"
	EventLease   = "lease"
	EventLock    = "lock"
	EventAudit   = "audit"
	// EventOccurrence: a skip or a miss was recorded (studio_occurrence,
	// migration 00010's trigger; docs/events.md).
	EventOccurrence = "occurrence"
	EventResync     = "resync"
	EventReconnect  = "reconnect"
)

// Event is one row of studio_event.
type Event struct {
	ID   int64           `json:"id"`
	At   time.Time       `json:"at"`
	Name string          `json:"event"`
	Data json.RawMessage `json:"data"`
}

// Querier is what the stream needs of a pool.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Read returns the events after id after, in id order, at most limit.
func Read(ctx context.Context, q Querier, after int64, limit int) ([]Event, error) {
	ctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	rows, err := q.Query(ctx, `SELECT `+eventColumns+` FROM studio_event WHERE id > $1 ORDER BY id LIMIT $2`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read the event stream: %w", err)
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var e Event
		var data []byte
		err := r.Scan(&e.ID, &e.At, &e.Name, &data)
		e.Data, e.At = data, e.At.UTC()
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the event stream: %w", err)
	}
	return evs, nil
}

// replay is Read for a resuming client, with the oldest id the table
// still has, read in the same snapshot as the rows (0 when it is empty):
// housekeeping prunes the oldest events, so a client whose id is below
// that has missed some.
func replay(ctx context.Context, q Querier, after int64, limit int) ([]Event, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	rows, err := q.Query(ctx, `SELECT `+eventColumns+`, (SELECT coalesce(min(id), 0) FROM studio_event)
FROM studio_event WHERE id > $1 ORDER BY id LIMIT $2`, after, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("read the event stream: %w", err)
	}
	var oldest int64
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var e Event
		var data []byte
		err := r.Scan(&e.ID, &e.At, &e.Name, &data, &oldest)
		e.Data, e.At = data, e.At.UTC()
		return e, err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read the event stream: %w", err)
	}
	return evs, oldest, nil
}

// Latest returns the newest event id (0 when there is none).
func Latest(ctx context.Context, q Querier) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	var id int64
	if err := q.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM studio_event`).Scan(&id); err != nil {
		return 0, fmt.Errorf("read the event stream: %w", err)
	}
	return id, nil
}

// Errors a subscription ends with (Sub.Err).
var (
	// ErrClosed: the hub is draining; the client should reconnect elsewhere.
	ErrClosed = errors.New("the event stream is closing: reconnect")
	// ErrSlow: the client fell ClientBuffer events behind and was dropped.
	ErrSlow = errors.New("client too slow: dropped")
	// ErrReset: the table's newest id is below the last one the hub handed
	// out (it was emptied, recreated or restored from a backup). The
	// client reconnects, and its old id then gets a resync.
	ErrReset = errors.New("the event stream's ids went back: reconnect")
)

// DefaultMaxClients is how many event stream clients one replica serves
// at once; past it, GET /v1/events answers 503 with Retry-After. Each
// client costs a goroutine, a ClientBuffer of events and a connection:
// 2,000 clients took a replica from 38 to 165 MB (issue 21).
const DefaultMaxClients = 500

// HubOptions configure a Hub.
type HubOptions struct {
	DB     Querier
	Logger *slog.Logger
	// MaxClients caps the clients served at once (DefaultMaxClients if 0).
	MaxClients int
}

// Hub fans the table out to subscribers. Start it, Wake it on every
// events frame and bus reconnect, and call Reconnect when draining.
type Hub struct {
	startstop.Base
	o    HubOptions
	log  *slog.Logger
	wake chan struct{}
	// replays admits replayConns subscribes to the table at a time.
	replays chan struct{}

	mu     sync.Mutex
	subs   map[*Sub]struct{}
	last   int64 // the newest id handed to subscribers (or a new one's cursor)
	closed bool
	failed bool // the last read failed (log once)

	dropped, reads atomic.Int64
	// clients counts the HTTP clients being served (ServeHTTP), refused
	// those turned away by the cap.
	clients, refused atomic.Int64
	checked          time.Time // the last check for ids that went back (loop only)

	hooks hooks
}

// Dropped counts the clients dropped for being too slow.
func (h *Hub) Dropped() int64 { return h.dropped.Load() }

// Refused counts the clients turned away because MaxClients were served.
func (h *Hub) Refused() int64 { return h.refused.Load() }

func (h *Hub) maxClients() int {
	if h.o.MaxClients > 0 {
		return h.o.MaxClients
	}
	return DefaultMaxClients
}

// Reads counts the hub's reads of the table.
func (h *Hub) Reads() int64 { return h.reads.Load() }

// NewHub returns a stopped hub.
func NewHub(o HubOptions) *Hub {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Hub{o: o, log: o.Logger.With("service", "stream"), wake: make(chan struct{}, 1), replays: make(chan struct{}, replayConns), subs: map[*Sub]struct{}{}}
}

// Start starts the hub's reader.
func (h *Hub) Start(ctx context.Context) error {
	runCtx, err := h.StartInit(ctx)
	if err != nil {
		return fmt.Errorf("start the event stream: %w", err)
	}
	if h.o.DB == nil {
		h.StartFailed()
		return errors.New("start the event stream: a database is required")
	}
	h.Go(func() { h.loop(runCtx) })
	h.MarkStarted()
	return nil
}

// Wake asks for a read of the table; it never blocks.
func (h *Hub) Wake() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// Clients is the number of subscribers now.
func (h *Hub) Clients() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// Reconnect ends every subscription with ErrClosed and refuses new ones:
// the drain step that tells stream clients to reconnect elsewhere.
func (h *Hub) Reconnect() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for s := range h.subs {
		s.end(ErrClosed)
		delete(h.subs, s)
	}
}

func (h *Hub) loop(ctx context.Context) {
	defer h.Reconnect()
	safety := time.NewTicker(SafetyRead)
	defer safety.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.wake:
		case <-safety.C:
		}
		h.readAll(ctx)
	}
}

// readAll reads and fans out everything after h.last, while anyone listens.
func (h *Hub) readAll(ctx context.Context) {
	for ctx.Err() == nil {
		h.mu.Lock()
		n, last := len(h.subs), h.last
		h.mu.Unlock()
		if n == 0 {
			return
		}
		evs, err := Read(ctx, h.o.DB, last, readBatch)
		h.reads.Add(1)
		if err == nil && len(evs) == 0 && last > 0 && time.Since(h.checked) >= resetCheck {
			// Nothing new: check that the ids did not go back under the
			// hub, which would wait for ids past its last forever. At most
			// every resetCheck, so that a storm of forged notifications
			// (any role can NOTIFY) costs one read each, not two.
			h.checked = time.Now()
			var latest int64
			if latest, err = Latest(ctx, h.o.DB); err == nil {
				h.mu.Lock()
				if latest < h.last {
					h.resetLocked(latest)
				}
				h.mu.Unlock()
			}
		}
		if err != nil {
			h.mu.Lock()
			first := !h.failed
			h.failed = true
			h.mu.Unlock()
			if first && ctx.Err() == nil {
				h.log.Warn("event stream: read failed; retrying on the next notification", "error", err)
			}
			return
		}
		h.mu.Lock()
		if h.failed {
			h.failed = false
			h.log.Info("event stream: reading again")
		}
		for _, e := range evs {
			h.fanoutLocked(e)
		}
		if len(evs) > 0 && evs[len(evs)-1].ID > h.last {
			h.last = evs[len(evs)-1].ID
		}
		h.mu.Unlock()
		if len(evs) < readBatch {
			return
		}
	}
}

// resetLocked follows a table whose ids went back to latest: every
// subscriber's cursor is meaningless now, so each is ended (it reconnects
// with its old id and gets a resync), and the hub reads after latest.
func (h *Hub) resetLocked(latest int64) {
	h.log.Warn("event stream: the newest event id went back (the table was emptied, recreated or restored); clients reconnect", "last", h.last, "newest", latest)
	for s := range h.subs {
		s.end(ErrReset)
		delete(h.subs, s)
	}
	h.last = latest
}

func (h *Hub) fanoutLocked(e Event) {
	for s := range h.subs {
		if e.ID <= s.cursor {
			continue // the subscriber's own replay had it
		}
		select {
		case s.c <- e:
			s.cursor = e.ID
		default:
			s.end(ErrSlow)
			delete(h.subs, s)
			h.dropped.Add(1)
		}
	}
}

// Sub is one subscription. Read Backlog first, then C until Done.
type Sub struct {
	h *Hub
	// Resync is set when the subscriber missed more than ReplayMax events
	// (or named an id this stream never had): it must reload everything;
	// it resumes after Cursor.
	Resync bool
	// Cursor is the id the replay starts after, once Resync is handled.
	Cursor int64
	// Backlog is the replay, in id order.
	Backlog []Event

	c      chan Event
	cursor int64 // the newest id this subscriber has (hub lock)
	done   chan struct{}
	err    error
}

// C delivers the events after the backlog.
func (s *Sub) C() <-chan Event { return s.c }

// Done is closed when the subscription ends; Err says why.
func (s *Sub) Done() <-chan struct{} { return s.done }

// Err is ErrClosed, ErrSlow or ErrReset once Done is closed, nil before.
func (s *Sub) Err() error {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return s.err
}

func (s *Sub) end(err error) {
	if s.err == nil {
		s.err = err
		close(s.done)
	}
}

// Close ends the subscription (the client went away).
func (s *Sub) Close() {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	delete(s.h.subs, s)
}

// Subscribe starts a subscription after event id after, or, when fromNow,
// after the newest event. It replays what was missed (at most ReplayMax,
// else Resync) and then follows the hub, so the subscriber gets every
// event once, in order.
func (h *Hub) Subscribe(ctx context.Context, after int64, fromNow bool) (*Sub, error) {
	s := &Sub{h: h, c: make(chan Event, ClientBuffer), done: make(chan struct{})}
	select {
	case h.replays <- struct{}{}:
		defer func() { <-h.replays }()
	case <-ctx.Done():
		return nil, fmt.Errorf("read the event stream: %w", context.Cause(ctx))
	}
	latest, err := Latest(ctx, h.o.DB)
	if err != nil {
		return nil, err
	}
	cursor := after
	switch {
	case fromNow:
		cursor = latest
	case after > latest:
		// An id this stream never had (another installation's, or a table
		// that was recreated): nothing to replay against.
		s.Resync, cursor = true, latest
	default:
		evs, oldest, err := replay(ctx, h.o.DB, after, ReplayMax+1)
		if err != nil {
			return nil, err
		}
		// Missed events that housekeeping pruned: the oldest kept id is
		// past the one after the client's, or every event after the
		// client's (up to latest) is gone. A rolled-back id just before
		// the oldest one can cause a needless resync, which only costs a
		// reload. 0 asks for everything kept, so it never misses any.
		pruned := after > 0 && after < latest && (len(evs) == 0 || oldest > after+1)
		if len(evs) > ReplayMax || pruned {
			s.Resync, cursor = true, latest
		} else {
			s.Backlog = evs
			if len(evs) > 0 {
				cursor = evs[len(evs)-1].ID
			}
		}
	}
	s.Cursor = cursor
	if h.hooks.afterReplay != nil {
		h.hooks.afterReplay()
	}
	// Catch up with the hub: join once it has handed out nothing after the
	// cursor, so the hub's next read delivers the rest.
	for {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return nil, ErrClosed
		}
		if latest < h.last {
			// latest was read before the replay, and the hub has read
			// newer events since: that is no evidence that the ids went
			// back. Only a newest id read after the hub handed out
			// h.last, and below it, is (the hub reads only committed
			// rows, which a later read still sees unless the table was
			// emptied, recreated or restored).
			handed := h.last
			h.mu.Unlock()
			fresh, err := Latest(ctx, h.o.DB)
			if err != nil {
				return nil, err
			}
			h.mu.Lock()
			if fresh < handed && h.last == handed && !h.closed {
				h.resetLocked(fresh) // the ids went back under the hub
				// This subscriber's replay came from the table as it was:
				// it reloads everything, from the new newest id on.
				s.Resync, s.Backlog, cursor, s.Cursor = true, nil, fresh, fresh
				latest = fresh
			} else {
				latest = max(latest, fresh)
			}
		}
		if len(h.subs) == 0 {
			h.last = max(h.last, cursor)
		}
		if h.last <= cursor {
			s.cursor = cursor
			h.subs[s] = struct{}{}
			h.mu.Unlock()
			h.Wake()
			return s, nil
		}
		upTo := h.last
		h.mu.Unlock()
		for cursor < upTo {
			evs, err := Read(ctx, h.o.DB, cursor, readBatch)
			if err != nil {
				return nil, err
			}
			if len(evs) == 0 {
				// What the hub handed out up to upTo is gone (pruned):
				// there is nothing to replay up to it.
				cursor = upTo
				break
			}
			s.Backlog = append(s.Backlog, evs...)
			cursor = evs[len(evs)-1].ID
		}
	}
}
