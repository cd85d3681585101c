// Package replicas is the replica registry of SPEC §6: each `studioctl run`
// process registers a row in studio_replica, heartbeats it every 5 s in
// database time from a dedicated goroutine on its own connection, and proves
// with its incarnation that the id is still its own.
package replicas

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/clock"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/liveness"
	"github.com/studioctl/studioctl/internal/startstop"
)

// HeartbeatEvery is how often a replica writes heartbeat_at.
const HeartbeatEvery = liveness.HeartbeatEvery

// GoneAfter is how long without a heartbeat makes a replica gone.
const GoneAfter = liveness.GoneAfter

// heartbeatTimeoutShare is the fraction of the interval a heartbeat
// statement may take: its deadline is shorter than the interval it protects.
const heartbeatTimeoutShare = 0.8

// State of a replica.
type State string

const (
	StateStarting State = "starting"
	StateReady    State = "ready"
	StateDraining State = "draining"
	StateStopped  State = "stopped"
)

var (
	// ErrLiveDuplicate: another live process has this id.
	ErrLiveDuplicate = errors.New("a live replica already has this id")
	// ErrIncarnationLost: another process took this id over; this one must stop.
	ErrIncarnationLost = errors.New("replica id was taken over by another process")
)

// MaxIDBytes bounds a replica id (replica.id).
const MaxIDBytes = 64

// idPattern is the job id rule, with "." and "_" allowed as well (host
// names have dots).
var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// ValidateID checks a replica id: [a-z0-9][a-z0-9._-]*, at most MaxIDBytes
// bytes. The message names neither key nor variable; callers add them.
func ValidateID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("must not be empty")
	case len(id) > MaxIDBytes:
		return fmt.Errorf("%q is %d bytes, at most %d allowed", id, len(id), MaxIDBytes)
	case !idPattern.MatchString(id):
		return fmt.Errorf("%q must match [a-z0-9][a-z0-9._-]* (lower case letters, digits, '.', '_' and '-')", id)
	}
	return nil
}

// DefaultID is <host>-<6 random hex>, the host name lower-cased, with any
// other character turned into "-" and cut so the id passes ValidateID.
func DefaultID() string {
	b := make([]byte, 3)
	rand.Read(b)
	return DefaultIDHost() + "-" + hex.EncodeToString(b)
}

// DefaultIDHost is the <host> part of DefaultID: the same on every start,
// unlike the random part.
func DefaultIDHost() string {
	h, err := os.Hostname()
	if err != nil {
		h = ""
	}
	h = strings.Map(func(r rune) rune {
		switch {
		case r >= 'A' && r <= 'Z':
			return r + ('a' - 'A')
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '-'
	}, h)
	if len(h) > MaxIDBytes-7 {
		h = h[:MaxIDBytes-7]
	}
	if h == "" || !idPattern.MatchString(h) {
		h = "replica"
	}
	return h
}

// Options configure a Registry.
type Options struct {
	ID       string
	Host     string // default os.Hostname()
	Version  string
	HTTPAddr string

	HeartbeatEvery time.Duration // default HeartbeatEvery; tests may shorten it
	Logger         *slog.Logger
	// OnLost is called once, from the heartbeat goroutine, when a heartbeat
	// finds the row taken by another incarnation.
	OnLost func(error)
	// OnBeat, when set, is called from the heartbeat goroutine after each
	// heartbeat with its error (nil when it succeeded), so the host can
	// tell a read-only database from a reachable primary.
	OnBeat func(error)
	// Clock is the replica's clock, whose offset from database time every
	// heartbeat measures (default clock.Real; tests skew it).
	Clock clock.Clock
	// Incarnation is this process's incarnation (zero: a new one). A host
	// that retries its start keeps one for every try, so a registration
	// of an earlier try is its own, not a live duplicate.
	Incarnation uuid.UUID
}

// Registry is this process's row in studio_replica and its heartbeat.
type Registry struct {
	cfg        *pgx.ConnConfig
	connString string
	o          Options
	log        *slog.Logger
	incarn     uuid.UUID
	epoch      time.Time // local monotonic reference for heartbeat stamps

	mu      sync.Mutex // guards conn: the heartbeat goroutine and SetState share it
	conn    *pgx.Conn
	restart Restart // what Register found; r.mu

	startstop.Base
	registered atomic.Bool   // Register succeeded
	loopDone   chan struct{} // closed when the heartbeat goroutine returns (Stop, or the id lost)

	beats    atomic.Int64
	failures atomic.Int64
	lastBeat atomic.Int64 // nanoseconds since epoch (monotonic) of the last successful heartbeat
	maxGap   atomic.Int64 // nanoseconds: the longest time between two successful heartbeats
	lost     atomic.Bool
	// offset: nanoseconds, database time minus the replica's clock, as the
	// last registration or heartbeat measured it; measured: any was.
	offset   atomic.Int64
	measured atomic.Bool
}

// NewRegistry prepares a registry; it connects in Register.
func NewRegistry(cfg *pgx.ConnConfig, connString string, o Options) *Registry {
	if o.HeartbeatEvery <= 0 {
		o.HeartbeatEvery = HeartbeatEvery
	}
	if o.Host == "" {
		o.Host, _ = os.Hostname()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Incarnation == uuid.Nil {
		o.Incarnation = uuid.New()
	}
	// The caller's logger names the replica (the host's carries replica_id).
	return &Registry{cfg: cfg, connString: connString, o: o, log: o.Logger, incarn: o.Incarnation, epoch: time.Now(), loopDone: make(chan struct{})}
}

// ID is the replica id.
func (r *Registry) ID() string { return r.o.ID }

// Incarnation is this process's incarnation.
func (r *Registry) Incarnation() uuid.UUID { return r.incarn }

func (r *Registry) timeout() time.Duration {
	return time.Duration(float64(r.o.HeartbeatEvery) * heartbeatTimeoutShare)
}

// connLocked returns the dedicated connection, connecting if needed. r.mu held.
func (r *Registry) connLocked(ctx context.Context) (*pgx.Conn, error) {
	if r.conn != nil && !r.conn.IsClosed() {
		return r.conn, nil
	}
	conn, err := db.Connect(ctx, r.cfg, r.connString)
	if err != nil {
		return nil, err
	}
	r.conn = conn
	return conn, nil
}

func (r *Registry) dropConnLocked() {
	if r.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r.conn.Close(ctx)
		cancel()
		r.conn = nil
	}
}

// registerSQL inserts the row, or takes over the id of a replica that is
// stopped or gone. It affects no row when the id belongs to a live replica.
// Taking over the row of an incarnation that ended without a recorded stop
// (a crash: state not stopped) keeps that incarnation and its last
// heartbeat in last_crash_incarnation and last_crash_at, so doctor's
// crashed_replicas still counts the crash (migration 00008); the statement
// returns them when it did.
//
// The row of this incarnation itself is taken again whatever it says: a
// start that registered, failed on a transient database error and could
// not record its stop registers again with the same incarnation
// (Options.Incarnation), and that is no crash and no duplicate.
//
// A row whose heartbeat is ahead of database time (liveness.AheadSQL: no
// replica's heartbeat wrote it) is taken over too, since it is not live,
// but not recorded as a crash: nothing ran under it.
var registerSQL = registerSQLWith("", "", "")

// registerProcessSQL is registerSQL where migration 00021 made the column
// process: it records $9, and takes over the live row of the incarnation
// $10, which Register proved ended (processGone).
var registerProcessSQL = registerSQLWith(", process", ", $9", ", process = EXCLUDED.process")

func registerSQLWith(col, val, set string) string {
	takeOver := ""
	if col != "" {
		takeOver = " OR r.incarnation = $10"
	}
	return `
WITH prev AS (SELECT p.state, p.incarnation, p.heartbeat_at FROM studio_replica p WHERE p.id = $1 AND p.incarnation <> $2 AND p.state <> 'stopped' AND NOT ` + liveness.AheadSQL("p") + `)
INSERT INTO studio_replica AS r (id, incarnation, host, pid, version, http_addr, state, started_at, heartbeat_at, stopped_at` + col + `)
VALUES ($1, $2, $3, $4, $5, $6, 'starting', now(), now(), NULL` + val + `)
ON CONFLICT (id) DO UPDATE SET incarnation = EXCLUDED.incarnation, host = EXCLUDED.host, pid = EXCLUDED.pid,
  version = EXCLUDED.version, http_addr = EXCLUDED.http_addr, state = 'starting', started_at = now(),
  heartbeat_at = now(), stopped_at = NULL, clock_offset_seconds = NULL` + set + `,
  last_crash_at = CASE WHEN r.state <> 'stopped' AND r.incarnation <> EXCLUDED.incarnation AND NOT ` + liveness.AheadSQL("r") + ` THEN r.heartbeat_at ELSE r.last_crash_at END,
  last_crash_incarnation = CASE WHEN r.state <> 'stopped' AND r.incarnation <> EXCLUDED.incarnation AND NOT ` + liveness.AheadSQL("r") + ` THEN r.incarnation ELSE r.last_crash_incarnation END
WHERE NOT ` + liveness.LiveSQL("r") + ` OR r.incarnation = EXCLUDED.incarnation` + takeOver + `
RETURNING now(), pg_notify($7, $8), (SELECT p.incarnation FROM prev p), (SELECT p.heartbeat_at FROM prev p)`
}

// closeRunsSQL marks interrupted the runs that earlier incarnations of
// replica $1 left running: at registration no run of this incarnation has
// started, and the id is this process's, so every running row of it is of a
// process that is gone. $2 is the reason recorded in error.
const closeRunsSQL = `UPDATE studio_job_run SET outcome = 'interrupted', finished_at = now(), error = $2
WHERE replica_id = $1 AND outcome = 'running' RETURNING seq`

// closeRunsEventsSQL writes the run events of the runs closeRunsSQL
// closed, as housekeeping does for a gone replica's (docs/events.md).
const closeRunsEventsSQL = `SELECT studio_event_runs(array_agg(studio_event_run_data(r) ORDER BY r.seq), '{}')
FROM studio_job_run r WHERE r.seq = ANY($1)`

// Restart is what a registration found of the previous process with the
// same id.
type Restart struct {
	// Crashed: the previous incarnation ended without a recorded stop.
	Crashed bool
	// Incarnation and LastHeartbeat are the crashed incarnation's.
	Incarnation   uuid.UUID
	LastHeartbeat time.Time
	// Interrupted are the seqs of the runs it left running, now marked
	// interrupted.
	Interrupted []int64
}

// stateSignal is the payload of the replica.state signal the registry
// sends, in the same statement, with every state change of its row, so a
// watching client (replicas list --watch) redraws at once.
func (r *Registry) stateSignal() (string, error) {
	p, err := bus.Encode(bus.Signal(bus.KindReplicaState, r.o.ID))
	if err != nil {
		return "", err
	}
	return p[0], nil
}

// Register inserts this replica in state starting. ErrLiveDuplicate when a
// live replica has the id.
func (r *Registry) Register(ctx context.Context) error {
	if err := ValidateID(r.o.ID); err != nil {
		return fmt.Errorf("register replica: id %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, db.ConnectTimeout)
	defer cancel()
	conn, err := r.connLocked(ctx)
	if err != nil {
		return err
	}
	signal, err := r.stateSignal()
	if err != nil {
		return fmt.Errorf("register replica %q: %w", r.o.ID, err)
	}
	var withProcess bool
	if err := conn.QueryRow(ctx, hasProcessColumnSQL).Scan(&withProcess); err != nil {
		r.dropConnLocked()
		return fmt.Errorf("register replica %q: %w", r.o.ID, err)
	}
	key := processKey()
	var crashedInc *uuid.UUID
	var crashedBeat *time.Time
	register := func(ended *uuid.UUID) error {
		sql := registerSQL
		args := []any{r.o.ID, r.incarn, r.o.Host, os.Getpid(), r.o.Version, r.o.HTTPAddr, bus.Channel, signal}
		if withProcess {
			var process *string
			if key != "" {
				process = &key
			}
			sql, args = registerProcessSQL, append(args, process, ended)
		}
		var dbNow time.Time
		t0 := r.o.Clock.Now()
		err := conn.QueryRow(ctx, sql, args...).Scan(&dbNow, nil, &crashedInc, &crashedBeat)
		if err == nil {
			r.measure(dbNow, t0, r.o.Clock.Now())
		}
		return err
	}
	err = register(nil)
	if errors.Is(err, pgx.ErrNoRows) && withProcess && key != "" {
		// The live row may be of a process of this machine that has ended
		// (a clean stop that could not record stopped, a crash): then it
		// is taken over at once instead of after GoneAfter.
		inc, pid, gone, herr := r.endedHolder(ctx, conn, key)
		if herr != nil {
			err = herr
		} else if gone {
			r.log.Info("replicas: the live row of this id is of a process of this machine that has ended; taking it over",
				"previous_incarnation", inc, "previous_pid", pid)
			err = register(&inc)
		}
	}
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		r.dropConnLocked()
		return fmt.Errorf("register replica %q: %w", r.o.ID, err)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("register replica %q: %w (its heartbeat is less than %s old); stop it first, or choose another replica.id", r.o.ID, ErrLiveDuplicate, GoneAfter)
	}
	r.lastBeat.Store(int64(time.Since(r.epoch)))
	r.registered.Store(true)
	if crashedInc != nil && crashedBeat != nil {
		r.restart.Crashed, r.restart.Incarnation, r.restart.LastHeartbeat = true, *crashedInc, crashedBeat.UTC()
		r.log.Warn("replicas: the previous process with this id ended without a recorded stop (a crash); doctor counts it in crashed_replicas",
			"previous_incarnation", *crashedInc, "last_heartbeat", crashedBeat.UTC())
	}
	// The runs earlier incarnations left running are over: no process runs
	// them any more.
	seqs, err := r.closeRunsLocked(ctx, conn)
	if err != nil {
		r.dropConnLocked()
		return fmt.Errorf("register replica %q: %w", r.o.ID, err)
	}
	r.restart.Interrupted = seqs
	if len(seqs) > 0 {
		r.log.Warn("replicas: runs an earlier process with this id left running were marked interrupted", "runs", len(seqs), "seqs", seqs)
	}
	return nil
}

// closeRunsLocked marks interrupted the runs earlier incarnations of this
// id left running, with their events, in one transaction. r.mu held.
func (r *Registry) closeRunsLocked(ctx context.Context, conn *pgx.Conn) ([]int64, error) {
	reason := fmt.Sprintf("replica %s restarted (incarnation %s) while the run was going: the run was interrupted", r.o.ID, r.incarn)
	var seqs []int64
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, closeRunsSQL, r.o.ID, reason)
		if err != nil {
			return err
		}
		seqs, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || len(seqs) == 0 {
			return err
		}
		_, err = tx.Exec(ctx, closeRunsEventsSQL, seqs)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("mark runs of earlier incarnations interrupted: %w", err)
	}
	return seqs, nil
}

// Restarted says what Register found of the previous process with this id:
// whether it crashed, and the runs it left running (now interrupted).
func (r *Registry) Restarted() Restart {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.restart
}

// SetState records a state change; stopped also sets stopped_at. It fails
// with ErrIncarnationLost when the id is no longer this process's.
func (r *Registry) SetState(ctx context.Context, s State) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, db.ConnectTimeout)
	defer cancel()
	conn, err := r.connLocked(ctx)
	if err != nil {
		return fmt.Errorf("set replica state %s: %w", s, err)
	}
	signal, err := r.stateSignal()
	if err != nil {
		return fmt.Errorf("set replica state %s: %w", s, err)
	}
	tag, err := conn.Exec(ctx, `UPDATE studio_replica SET state = $3, heartbeat_at = now(),
  stopped_at = CASE WHEN $3 = 'stopped' THEN now() ELSE NULL END
WHERE id = $1 AND incarnation = $2 RETURNING pg_notify($4, $5)`, r.o.ID, r.incarn, string(s), bus.Channel, signal)
	if err != nil {
		r.dropConnLocked()
		return fmt.Errorf("set replica state %s: %w", s, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("set replica state %s: %w", s, ErrIncarnationLost)
	}
	return nil
}

// Start registers the replica (unless Register already did) and runs the
// heartbeat goroutine until Stop. It fails for real: with the error of
// Register (a live replica has the id, a read-only database), and then
// nothing runs and the connection is closed.
func (r *Registry) Start(ctx context.Context) error {
	runCtx, err := r.StartInit(ctx)
	if err != nil {
		return fmt.Errorf("start replica heartbeat: %w", err)
	}
	if !r.registered.Load() {
		if err := r.Register(ctx); err != nil {
			r.StartFailed()
			r.closeConn()
			return err
		}
	}
	if !r.Go(func() { r.loop(runCtx) }) {
		r.closeConn() // Stop came during Register
		return fmt.Errorf("start replica heartbeat: %w", startstop.ErrStopped)
	}
	r.MarkStarted()
	return nil
}

// Stop ends the heartbeat goroutine and closes the connection. Safe to
// call twice, concurrently, and without Start. SetState still works after
// Stop (it connects again), so the host can record stopped last.
func (r *Registry) Stop() {
	r.Base.Stop()
	r.closeConn()
}

func (r *Registry) closeConn() {
	r.mu.Lock()
	r.dropConnLocked()
	r.mu.Unlock()
}

func (r *Registry) loop(ctx context.Context) {
	defer close(r.loopDone)
	t := time.NewTicker(r.o.HeartbeatEvery)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := r.beat(ctx)
		if r.o.OnBeat != nil && !errors.Is(err, ErrIncarnationLost) && (err == nil || ctx.Err() == nil) {
			r.o.OnBeat(err)
		}
		switch {
		case errors.Is(err, ErrIncarnationLost):
			r.lost.Store(true)
			r.log.Error("replicas: heartbeat found the id taken over by another process; stopping", "incarnation", r.incarn)
			if r.o.OnLost != nil {
				r.o.OnLost(err)
			}
			return
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			r.failures.Add(1)
			if !failing {
				r.log.Warn("replicas: heartbeat failed", "error", err)
				failing = true
			}
		default:
			if failing {
				r.log.Info("replicas: heartbeat recovered")
				failing = false
			}
		}
	}
}

// heartbeatSQL writes the heartbeat and the clock offset the previous one
// measured, and returns the database's now() for the next measure.
const heartbeatSQL = `UPDATE studio_replica SET heartbeat_at = now(), clock_offset_seconds = $3
WHERE id = $1 AND incarnation = $2 RETURNING now()`

// measure records the clock offset from a database time read between the
// local times t0 and t1: database time minus the midpoint of the round
// trip.
func (r *Registry) measure(dbNow, t0, t1 time.Time) {
	mid := t0.Add(t1.Sub(t0) / 2)
	r.offset.Store(int64(dbNow.Sub(mid)))
	r.measured.Store(true)
}

// ClockOffset is database time minus the replica's clock, as last
// measured (0 before any measure). The runner fires at due times in
// database time: its clock plus this.
func (r *Registry) ClockOffset() time.Duration { return time.Duration(r.offset.Load()) }

// offsetArg is the last measured offset in seconds, or NULL.
func (r *Registry) offsetArg() *float64 {
	if !r.measured.Load() {
		return nil
	}
	v := r.ClockOffset().Seconds()
	return &v
}

// beat writes one heartbeat with a deadline shorter than the interval.
func (r *Registry) beat(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	// A connection that died since the last beat (a terminated backend, a
	// database restart) is replaced at once, within the same deadline, so one
	// fault does not cost a whole interval.
	for attempt := 0; ; attempt++ {
		conn, err := r.connLocked(ctx)
		if err != nil {
			return err
		}
		var dbNow time.Time
		t0 := r.o.Clock.Now()
		err = conn.QueryRow(ctx, heartbeatSQL, r.o.ID, r.incarn, r.offsetArg()).Scan(&dbNow)
		t1 := r.o.Clock.Now()
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrIncarnationLost
		}
		if err == nil {
			r.measure(dbNow, t0, t1)
			break
		}
		r.dropConnLocked()
		if attempt > 0 || ctx.Err() != nil || !(conn.IsClosed() || pgconn.SafeToRetry(err)) {
			return err
		}
	}
	now := int64(time.Since(r.epoch))
	if prev := r.lastBeat.Swap(now); prev != 0 {
		if gap := now - prev; gap > r.maxGap.Load() {
			r.maxGap.Store(gap)
		}
	}
	r.beats.Add(1)
	return nil
}

// Heartbeats is the number of successful heartbeats.
func (r *Registry) Heartbeats() int64 { return r.beats.Load() }

// HeartbeatFailures is the number of failed heartbeats.
func (r *Registry) HeartbeatFailures() int64 { return r.failures.Load() }

// MaxGap is the longest time between two successful heartbeats (or the
// registration and the first heartbeat).
func (r *Registry) MaxGap() time.Duration { return time.Duration(r.maxGap.Load()) }

// SinceLastHeartbeat is the local time since the last successful heartbeat.
func (r *Registry) SinceLastHeartbeat() time.Duration {
	last := r.lastBeat.Load()
	if last == 0 {
		return 0
	}
	return time.Since(r.epoch) - time.Duration(last)
}

// Lost reports whether the id was taken over.
func (r *Registry) Lost() bool { return r.lost.Load() }
