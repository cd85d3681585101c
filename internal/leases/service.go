package leases

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/liveness"
	"github.com/studioctl/studioctl/internal/natsort"
	"github.com/studioctl/studioctl/internal/startstop"
)

// The numbers of SPEC §7 and ADR-0152 §4. They are the contract.
const (
	// RenewEvery is the loop's period: renew, release, claim.
	RenewEvery = 5 * time.Second
	// LeaseTTL: a lease whose renewed_at is older than this, in database
	// time, may be claimed by another replica.
	LeaseTTL = 15 * time.Second
	// TrustWindow: a lease is lost locally once its last successful
	// renewal began longer ago than this, on the monotonic clock. It is
	// shorter than LeaseTTL, so duties stop before anyone may claim.
	TrustWindow = 10 * time.Second
	// StatementDeadline bounds every statement of the loop, shorter than
	// RenewEvery.
	StatementDeadline = 4 * time.Second
	// DutyStopWait bounds how long a release waits for cancelled duties to
	// end (Options.AwaitDuties); after it the leases are released anyway.
	// With the statement deadline it stays well under TrustWindow.
	DutyStopWait = 2 * time.Second
)

// Causes of a cancelled duty context (context.Cause).
var (
	// ErrLost: no successful renewal began within TrustWindow.
	ErrLost = errors.New("lease lost: no renewal within the trust window")
	// ErrMoved: placement moved the cluster to another replica, or the
	// replica is draining; this replica released it.
	ErrMoved = errors.New("lease released: placement moved")
	// ErrGone: the renewal did not find the lease any more: an operator
	// released or removed it (or another replica took it over).
	ErrGone = errors.New("lease no longer owned")
)

// Querier is the part of a pool the loop needs (*pgxpool.Pool, or a
// wrapper that counts statements).
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Options configure a Service.
type Options struct {
	ID string  // this replica's id (studio_replica.id), the owner it writes
	DB Querier // the shared database
	// Logger is the replica's logger, which names it (replica_id): the
	// service adds only service=leases, so no line carries a key twice.
	Logger *slog.Logger

	// Signal sends leases.rebalance after a release and when this replica
	// first finds itself live and ready. Default: bus.Notify on DB.
	Signal func(ctx context.Context) error

	// OnAcquire is called when this replica starts to own cluster, with
	// the context of its duties; OnLose when it stops, after that context
	// is cancelled with the cause (ErrLost, ErrMoved, ErrGone or
	// startstop.ErrStopping). Both are called with the service's lock
	// held: they must not block and must not call the Service.
	OnAcquire func(cluster string, ctx context.Context)
	OnLose    func(cluster string, cause error)

	// AwaitDuties, when set, waits until the cancelled duties of clusters
	// have ended, or ctx is done (at most DutyStopWait). The loop calls it
	// between cancelling the duties of the leases it gives up (placement
	// moved, drain) and releasing them, so the next owner never starts a
	// duty while the old one is still ending.
	AwaitDuties func(ctx context.Context, clusters []string)

	// LiveSet, when set, replaces the database's live, ready replicas
	// (tests give two services different views).
	LiveSet func() []string

	timing timing // zero: the constants above (tests shorten them)
}

type timing struct {
	renewEvery, ttl, trust, deadline time.Duration
}

func (t timing) orDefault() timing {
	if t.renewEvery == 0 {
		return timing{renewEvery: RenewEvery, ttl: LeaseTTL, trust: TrustWindow, deadline: StatementDeadline}
	}
	return t
}

type held struct {
	anchor time.Time // when the last successful renewal (or the claim) began
	gen    int64
	ctx    context.Context
	cancel context.CancelCauseFunc
	end    *trustEnd // anchor + the trust window, for TrustedUntil
}

// setAnchor records that the last successful renewal of h began at t.
// s.mu held.
func (s *Service) setAnchor(h *held, t time.Time) {
	h.anchor = t
	h.end.set(t.Add(s.t.trust))
}

// trustEnd is the end of a lease's trust window, read without the
// service's lock by the duties' commands (TrustedUntil).
type trustEnd struct {
	mu  sync.Mutex
	at  time.Time
	gen int64 // the lease's generation (Generation)
}

func (e *trustEnd) setGen(g int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.gen = g
}

func (e *trustEnd) set(t time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.at = t
}

func (e *trustEnd) get() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.at
}

// trustKey is the key of a duty context's *trustEnd.
type trustKey struct{}

// TrustedUntil returns when the trust window of the lease whose duty
// context is ctx (the one OnAcquire gives) ends, as of the last successful
// renewal: after it the replica no longer counts the lease as its own, and
// LeaseTTL - TrustWindow later another replica may claim it. The runner
// gives it to a duty's command as its deadline, which the command's job
// shim enforces even while the replica is paused (docs/leases.md). It is
// on the monotonic clock; ok is false for any other context.
func TrustedUntil(ctx context.Context) (time.Time, bool) {
	e, ok := ctx.Value(trustKey{}).(*trustEnd)
	if !ok {
		return time.Time{}, false
	}
	return e.get(), true
}

// Generation returns the generation of the lease whose duty context is ctx
// (the one OnAcquire gives): it grows at every change of owner, so a
// duty's run gets it as its fencing token (docs/fencing.md). ok is false
// for any other context.
func Generation(ctx context.Context) (int64, bool) {
	e, ok := ctx.Value(trustKey{}).(*trustEnd)
	if !ok {
		return 0, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.gen, true
}

// Service is one replica's lease loop.
type Service struct {
	startstop.Base
	o   Options
	t   timing
	log *slog.Logger

	wake    chan struct{}
	roundMu sync.Mutex // one round, or ReleaseAll, at a time

	mu       sync.Mutex
	held     map[string]*held
	draining bool
	wasLive  bool
	timer    *time.Timer // the trust window's watchdog
	failing  bool        // the last round failed (log once)
	// batching: a round's loop of trust or lose calls arms the watchdog
	// once at its end (batch), not once a cluster: arming scans every
	// held lease, and a round over 5,000 clusters scanned 25 million of
	// them, long enough on a loaded host to miss the trust window
	// (issue 21). armPending: an arm was asked for meanwhile.
	batching, armPending bool
	scanned              int64 // held leases scanned by arming, for a test
	// live and liveAt: the live, ready replicas the last round read, and
	// when (Live).
	live   []string
	liveAt time.Time

	rounds atomic.Int64
}

// New returns a stopped Service.
func New(o Options) *Service {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Service{o: o, t: o.timing.orDefault(), log: o.Logger.With("service", "leases"),
		wake: make(chan struct{}, 1), held: map[string]*held{}}
	if s.o.Signal == nil {
		s.o.Signal = func(ctx context.Context) error {
			return bus.Notify(ctx, o.DB, bus.Signal(bus.KindLeasesRebalance, o.ID))
		}
	}
	return s
}

// Start starts the loop; its first round runs at once.
func (s *Service) Start(ctx context.Context) error {
	runCtx, err := s.StartInit(ctx)
	if err != nil {
		return fmt.Errorf("start leases: %w", err)
	}
	if s.o.ID == "" || s.o.DB == nil {
		s.StartFailed()
		return errors.New("start leases: replica id and database are required")
	}
	s.Go(func() { s.loop(runCtx) })
	s.MarkStarted()
	return nil
}

// Rebalance asks for a round at once (on a leases.rebalance signal). It
// never blocks; wake-ups that come during a round coalesce into one more.
func (s *Service) Rebalance() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Owned returns the clusters this replica owns and trusts now, each with
// the context of its duties.
func (s *Service) Owned() map[string]context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]context.Context, len(s.held))
	for c, h := range s.held {
		out[c] = h.ctx
	}
	return out
}

// liveViewRounds is how many rounds the live replicas a round read stay
// current for Live, so that one failed or late round does not matter.
const liveViewRounds = 3

// Live returns the live, ready replicas the last round read (the slice is
// never changed), and whether that read is current: no older than
// liveViewRounds rounds. The runner designates the replica that tries each
// installation job's lock over it (runner.Members), at no statement of its
// own.
func (s *Service) Live() ([]string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.liveAt.IsZero() || time.Since(s.liveAt) > liveViewRounds*s.t.renewEvery {
		return nil, false
	}
	return s.live, true
}

// Rounds counts the rounds run so far.
func (s *Service) Rounds() int64 { return s.rounds.Load() }

func (s *Service) loop(ctx context.Context) {
	defer s.loseAll(startstop.ErrStopping)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.wake:
		}
		began := time.Now()
		s.round(ctx)
		timer.Reset(max(0, s.t.renewEvery-time.Since(began)))
	}
}

// The loop's statements. Rows are locked in cluster order with SKIP LOCKED,
// so concurrent claims never deadlock and never wait on a renewal.
const (
	renewSQL = `UPDATE cluster_lease SET renewed_at = now() WHERE owner = $1 RETURNING cluster, generation`

	releaseSQL = `UPDATE cluster_lease SET owner = NULL, acquired_at = NULL, renewed_at = NULL, generation = generation + 1
WHERE owner = $1 AND cluster = ANY($2) RETURNING cluster`

	releaseAllSQL = `UPDATE cluster_lease SET owner = NULL, acquired_at = NULL, renewed_at = NULL, generation = generation + 1
WHERE owner = $1 RETURNING cluster`

	claimSQL = `WITH c AS (
  SELECT cluster FROM cluster_lease
  WHERE cluster = ANY($2) AND (owner IS NULL OR (owner <> $1 AND renewed_at < now() - make_interval(secs => $3)))
  ORDER BY cluster FOR UPDATE SKIP LOCKED)
UPDATE cluster_lease l SET owner = $1, acquired_at = now(), renewed_at = now(), generation = l.generation + 1
FROM c WHERE l.cluster = c.cluster RETURNING l.cluster, l.generation`
)

// viewSQL reads the live, ready replicas and every cluster, in one statement.
var viewSQL = `SELECT ARRAY(SELECT r.id FROM studio_replica r WHERE ` + liveness.LiveSQL("r") + ` AND r.state = 'ready' ORDER BY r.id),
ARRAY(SELECT cluster FROM cluster_lease ORDER BY cluster)`

func (s *Service) stmtCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.t.deadline)
}

func (s *Service) round(ctx context.Context) {
	s.roundMu.Lock()
	defer s.roundMu.Unlock()
	defer s.rounds.Add(1)

	// 1. Renew everything owned, in one statement.
	began := time.Now()
	owned, err := s.renew(ctx)
	if err != nil {
		s.fail(ctx, "renew leases", err)
		return
	}
	s.applyRenewal(owned, began)

	// 2. Where does each cluster belong now?
	live, clusters, err := s.view(ctx)
	if err != nil {
		s.fail(ctx, "read leases", err)
		return
	}
	s.mu.Lock()
	s.live, s.liveAt = live, time.Now()
	draining := s.draining
	s.mu.Unlock()
	me := !draining && slices.Contains(live, s.o.ID)
	var away, want []string
	listed := make(map[string]bool, len(clusters))
	s.batch(func() {
		for _, c := range clusters {
			listed[c] = true
			_, mine := owned[c]
			placedHere := me && Place(c, live) == s.o.ID
			switch {
			case mine && !placedHere:
				away = append(away, c)
			case mine:
				s.trust(c, owned[c], began)
			case placedHere:
				want = append(want, c)
			}
		}
		// A lease owned but no longer listed (removed meanwhile) is not trusted.
		for c := range owned {
			if !listed[c] {
				s.lose(c, ErrGone)
			}
		}
	})

	// 3. Release what moved away: duties first, then the rows, then a signal.
	signal := false
	if len(away) > 0 {
		s.batch(func() {
			for _, c := range away {
				s.lose(c, ErrMoved)
			}
		})
		s.awaitDuties(ctx, away)
		released, err := s.release(ctx, releaseSQL, away)
		if err != nil {
			s.fail(ctx, "release leases", err)
			return
		}
		if len(released) > 0 {
			s.log.Info("leases released: placement moved", "clusters", released)
			signal = true
		}
	}

	// 4. Claim what is placed here and free or expired; the statement's
	// own condition decides.
	if len(want) > 0 {
		began := time.Now()
		claimed, err := s.claim(ctx, want)
		if err != nil {
			s.fail(ctx, "claim leases", err)
			return
		}
		if len(claimed) > 0 {
			s.batch(func() {
				for _, c := range slices.SortedFunc(maps.Keys(claimed), natsort.Compare) {
					s.trust(c, claimed[c], began)
				}
			})
			s.log.Info("leases claimed", "clusters", slices.SortedFunc(maps.Keys(claimed), natsort.Compare))
		}
	}

	// A replica that has just become live and ready signals, so the others
	// release its share at once rather than at their next tick.
	s.mu.Lock()
	if me && !s.wasLive {
		signal = true
	}
	s.wasLive = me
	s.mu.Unlock()
	if signal {
		s.signal(ctx)
	}
	s.recovered()
}

func (s *Service) fail(ctx context.Context, what string, err error) {
	if ctx.Err() != nil {
		return // stopping: not a failure worth a warning
	}
	s.mu.Lock()
	first := !s.failing
	s.failing = true
	s.mu.Unlock()
	if first {
		s.log.Warn("leases round failed", "step", what, "err", err)
	}
}

func (s *Service) recovered() {
	s.mu.Lock()
	was := s.failing
	s.failing = false
	s.mu.Unlock()
	if was {
		s.log.Info("leases round succeeded again")
	}
}

func (s *Service) signal(ctx context.Context) {
	sctx, cancel := s.stmtCtx(ctx)
	defer cancel()
	if err := s.o.Signal(sctx); err != nil {
		s.log.Warn("signal leases.rebalance", "err", err)
	}
}

func (s *Service) renew(ctx context.Context) (map[string]int64, error) {
	sctx, cancel := s.stmtCtx(ctx)
	defer cancel()
	rows, err := s.o.DB.Query(sctx, renewSQL, s.o.ID)
	if err != nil {
		return nil, err
	}
	return collectGen(rows)
}

func (s *Service) claim(ctx context.Context, want []string) (map[string]int64, error) {
	sctx, cancel := s.stmtCtx(ctx)
	defer cancel()
	rows, err := s.o.DB.Query(sctx, claimSQL, s.o.ID, want, s.t.ttl.Seconds())
	if err != nil {
		return nil, err
	}
	return collectGen(rows)
}

func collectGen(rows pgx.Rows) (map[string]int64, error) {
	out := map[string]int64{}
	for rows.Next() {
		var c string
		var g int64
		if err := rows.Scan(&c, &g); err != nil {
			rows.Close()
			return nil, err
		}
		out[c] = g
	}
	return out, rows.Err()
}

func (s *Service) release(ctx context.Context, stmt string, clusters []string) ([]string, error) {
	sctx, cancel := s.stmtCtx(ctx)
	defer cancel()
	args := []any{s.o.ID}
	if clusters != nil {
		args = append(args, clusters)
	}
	rows, err := s.o.DB.Query(sctx, stmt, args...)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	natsort.Strings(out)
	return out, err
}

func (s *Service) view(ctx context.Context) (live, clusters []string, err error) {
	sctx, cancel := s.stmtCtx(ctx)
	defer cancel()
	if err := s.o.DB.QueryRow(sctx, viewSQL).Scan(&live, &clusters); err != nil {
		return nil, nil, err
	}
	if s.o.LiveSet != nil {
		live = s.o.LiveSet()
	}
	return live, clusters, nil
}

// applyRenewal updates the trust of every lease the renewal found and
// drops those it did not find. Leases it found that are not trusted yet
// are trusted once the view confirms their placement (round, step 2).
func (s *Service) applyRenewal(owned map[string]int64, began time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c, h := range s.held {
		if _, ok := owned[c]; !ok {
			s.loseLocked(c, ErrGone)
			continue
		}
		s.setAnchor(h, began)
	}
	s.armLocked()
}

// trust records that this replica owns c as of began, starting its duties
// if they do not run.
func (s *Service) trust(c string, gen int64, began time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return
	}
	if h, ok := s.held[c]; ok {
		if began.After(h.anchor) {
			s.setAnchor(h, began)
		}
		h.gen = gen
		h.end.setGen(gen)
		s.armLocked()
		return
	}
	if time.Since(began) >= s.t.trust {
		return // the statement took longer than the window: trust it next round
	}
	end := &trustEnd{gen: gen}
	cctx, cancel := context.WithCancelCause(context.Background())
	ctx := context.WithValue(cctx, trustKey{}, end)
	h := &held{gen: gen, ctx: ctx, cancel: cancel, end: end}
	s.setAnchor(h, began)
	s.held[c] = h
	s.armLocked()
	if s.o.OnAcquire != nil {
		s.o.OnAcquire(c, ctx)
	}
}

func (s *Service) lose(c string, cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loseLocked(c, cause)
	s.armLocked()
}

func (s *Service) loseLocked(c string, cause error) {
	h, ok := s.held[c]
	if !ok {
		return
	}
	delete(s.held, c)
	h.cancel(cause)
	if cause == ErrLost {
		s.log.Warn("lease lost: no renewal within the trust window", "cluster", c, "trust_window", s.t.trust)
	}
	if s.o.OnLose != nil {
		s.o.OnLose(c, cause)
	}
}

// awaitDuties waits, bounded by DutyStopWait, for the cancelled duties of
// clusters to end.
func (s *Service) awaitDuties(ctx context.Context, clusters []string) {
	if s.o.AwaitDuties == nil || len(clusters) == 0 {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, DutyStopWait)
	defer cancel()
	began := time.Now()
	s.o.AwaitDuties(wctx, clusters)
	if wctx.Err() != nil && ctx.Err() == nil {
		s.log.Warn("duties still ending after the wait; releasing their leases anyway", "clusters", clusters, "waited", time.Since(began))
	}
}

func (s *Service) loseAll(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range slices.SortedFunc(maps.Keys(s.held), natsort.Compare) {
		s.loseLocked(c, cause)
	}
	if s.timer != nil {
		s.timer.Stop()
	}
}

// armLocked sets the watchdog to the earliest end of a trust window.
func (s *Service) armLocked() {
	if s.batching {
		s.armPending = true
		return
	}
	s.scanned += int64(len(s.held))
	var first time.Time
	for _, h := range s.held {
		if first.IsZero() || h.anchor.Before(first) {
			first = h.anchor
		}
	}
	if first.IsZero() {
		if s.timer != nil {
			s.timer.Stop()
		}
		return
	}
	d := max(0, s.t.trust-time.Since(first))
	if s.timer == nil {
		s.timer = time.AfterFunc(d, s.expire)
		return
	}
	s.timer.Reset(d)
}

// batch runs f, a loop of trust or lose calls that runs no statement,
// and arms the watchdog once at its end.
func (s *Service) batch(f func()) {
	s.mu.Lock()
	s.batching = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.batching = false
		if s.armPending {
			s.armPending = false
			s.armLocked()
		}
	}()
	f()
}

// expire drops every lease whose trust window has ended.
func (s *Service) expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c, h := range s.held {
		if time.Since(h.anchor) >= s.t.trust {
			s.loseLocked(c, ErrLost)
		}
	}
	s.armLocked()
}

// ReleaseAll is the drain step: it stops claiming, cancels every duty and
// releases every lease of this replica in one statement, then signals so
// the others claim them at once. It returns the clusters released.
func (s *Service) ReleaseAll(ctx context.Context) ([]string, error) {
	s.mu.Lock()
	s.draining = true
	s.mu.Unlock()
	s.roundMu.Lock()
	defer s.roundMu.Unlock()
	var all []string
	s.mu.Lock()
	for c := range s.held {
		all = append(all, c)
	}
	s.mu.Unlock()
	s.loseAll(ErrMoved)
	s.awaitDuties(ctx, all)
	released, err := s.release(ctx, releaseAllSQL, nil)
	if err != nil {
		return nil, fmt.Errorf("release leases of %s: %w", s.o.ID, err)
	}
	if len(released) > 0 {
		s.log.Info("leases released: draining", "clusters", released)
		s.signal(ctx)
	}
	return released, nil
}
