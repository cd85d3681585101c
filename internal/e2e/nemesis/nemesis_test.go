package e2enemesis

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// The nemesis: what breaks, when, from one seed.

const (
	// envLength sets a long run's length (a Go duration, "1h"); unset: the
	// short CI run.
	envLength = "STUDIO_NEMESIS"
	// envSeed replays a run.
	envSeed = "STUDIO_NEMESIS_SEED"
	// shortSeed is the CI run's fixed seed.
	shortSeed = 26
	// shortLength is how long the CI run's nemesis starts faults.
	shortLength = 55 * time.Second
	// quietShort and quietLong: the quiet period after the last fault.
	quietShort = 25 * time.Second
	quietLong  = 60 * time.Second
	// settleAfter is how long after a fault its effects may last: a
	// stretch counts as fault-free from a fault's end plus this.
	settleAfter = 10 * time.Second
	// finalWithin bounds the final state checks after the last fault.
	finalWithin = 20 * time.Second
	// longCalmEvery and longCalm: a long run's calms (plan.CalmEvery).
	longCalmEvery = 4 * time.Minute
	longCalm      = 40 * time.Second
	// maxReplicaFaults is how many replicas may be under a fault at once.
	maxReplicaFaults = 2
)

// Fault kinds.
const (
	kindKill      = "kill-9"
	kindStop      = "sigstop"
	kindCut       = "cut"
	kindTerminate = "terminate-backends"
	kindPGRestart = "pg-restart"
	kindPromote   = "promote"
	kindDrain     = "drain"
	kindLeaseAdd  = "leases-add"
	kindLeaseRm   = "leases-remove"
	kindClock     = "clock-offset"
)

// allKinds is every fault kind, in a fixed order (the deck is shuffled).
var allKinds = []string{kindKill, kindStop, kindCut, kindTerminate, kindPGRestart, kindPromote, kindDrain, kindLeaseAdd, kindLeaseRm, kindClock}

// replicaKind says which kinds act on one replica.
func replicaKind(k string) bool {
	switch k {
	case kindKill, kindStop, kindCut, kindTerminate, kindDrain, kindClock:
		return true
	}
	return false
}

// fault is one fault as the nemesis applied it: the checker attributes
// exceptions with these windows.
type fault struct {
	ID     int
	Kind   string
	Target string // a replica id, "" for the database or the lease set
	Start  time.Time
	End    time.Time // when it was healed (the replica ready again, the standby synchronous again)
	Length time.Duration
	Note   string
	Err    string
	// Restarts counts the starts that exited before ready.
	Restarts int
}

func (f fault) String() string {
	s := fmt.Sprintf("#%d %s", f.ID, f.Kind)
	if f.Target != "" {
		s += " " + f.Target
	}
	s += fmt.Sprintf(" [%s, %s]", f.Start.Format("15:04:05.000"), f.End.Format("15:04:05.000"))
	if f.Note != "" {
		s += " " + f.Note
	}
	if f.Err != "" {
		s += " ERROR " + f.Err
	}
	return s
}

// plan is a run's length and seed.
type plan struct {
	Seed   int64
	Length time.Duration
	Quiet  time.Duration
	Long   bool
	// GapMin and GapMax bound the time between two fault starts.
	GapMin, GapMax time.Duration
	// CalmEvery, when set, makes a calm of length Calm (every fault
	// healed, then none) that often.
	CalmEvery, Calm time.Duration
}

func planFromEnv(t *testing.T) plan {
	t.Helper()
	p := plan{Seed: shortSeed, Length: shortLength, Quiet: quietShort, GapMin: time.Second, GapMax: 3 * time.Second}
	if s := os.Getenv(envLength); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("%s: %q is not a positive Go duration (for example 1h)", envLength, s)
		}
		p = plan{Seed: time.Now().UnixNano() % 1_000_000, Length: d, Quiet: quietLong, Long: true, GapMin: 2 * time.Second, GapMax: 10 * time.Second,
			CalmEvery: longCalmEvery, Calm: longCalm}
	}
	if s := os.Getenv(envSeed); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("%s: %q is not an integer", envSeed, s)
		}
		p.Seed = n
	}
	return p
}

// nemesis applies faults to the workload.
type nemesis struct {
	t     *testing.T
	w     *workload
	pair  *pgPair
	admin *pgxpool.Pool
	rnd   *rand.Rand // only the scheduler goroutine draws from it

	mu      sync.Mutex
	faults  []*fault
	busy    map[string]bool // replicas under a fault
	dbBusy  bool
	extras  []string // clusters added by leases add, not removed yet
	nextX   int
	counter int
}

func newNemesis(t *testing.T, p plan, w *workload, pair *pgPair, admin *pgxpool.Pool) *nemesis {
	return &nemesis{t: t, w: w, pair: pair, admin: admin, rnd: rand.New(rand.NewSource(p.Seed)), busy: map[string]bool{}}
}

// between draws a duration in [lo, hi].
func (n *nemesis) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(n.rnd.Int63n(int64(hi-lo)+1))
}

// run starts faults until length has passed, then waits for every fault
// to heal, and returns the faults. The first picks are a shuffled deck of
// every kind, so each happens at least once when the run is long enough;
// later picks are random. A pick that cannot start now (its replicas or
// the database busy) waits for the next gap.
func (n *nemesis) run(length time.Duration, p plan) []fault {
	deck := append([]string(nil), allKinds...)
	n.rnd.Shuffle(len(deck), func(i, j int) { deck[i], deck[j] = deck[j], deck[i] })
	end := time.Now().Add(length)
	var wg sync.WaitGroup
	calmAt := time.Now().Add(p.CalmEvery)
	for time.Now().Before(end) {
		pause(n.between(p.GapMin, p.GapMax))
		if p.CalmEvery > 0 && time.Now().After(calmAt) && time.Now().Add(p.Calm).Before(end) {
			// A calm: every fault healed, then none for a while, so the
			// checker has fault-free stretches to count runs against due
			// times over.
			wg.Wait()
			n.t.Logf("nemesis: calm for %s", p.Calm)
			pause(p.Calm)
			calmAt = time.Now().Add(p.CalmEvery)
			continue
		}
		// The deck's first kind that can start now; once the deck is
		// empty, a few random kinds until one can.
		var f *fault
		var apply func() error
		for i, kind := range deck {
			if f, apply = n.prepare(kind); f != nil {
				deck = append(deck[:i:i], deck[i+1:]...)
				break
			}
		}
		for try := 0; f == nil && len(deck) == 0 && try < 5; try++ {
			f, apply = n.prepare(allKinds[n.rnd.Intn(len(allKinds))])
		}
		if f == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := apply()
			n.mu.Lock()
			f.End = time.Now()
			if err != nil {
				f.Err = err.Error()
			}
			if f.Target != "" {
				delete(n.busy, f.Target)
			}
			if f.Kind == kindPGRestart || f.Kind == kindPromote {
				n.dbBusy = false
			}
			n.mu.Unlock()
			n.t.Logf("nemesis: end   %s", f)
		}()
	}
	wg.Wait()
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]fault, len(n.faults))
	for i, f := range n.faults {
		out[i] = *f
	}
	return out
}

// prepare reserves what kind needs and draws its parameters; nil when it
// cannot start now. apply runs the fault to its end (its heal).
func (n *nemesis) prepare(kind string) (*fault, func() error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f := &fault{Kind: kind}
	if replicaKind(kind) {
		if len(n.busy) >= maxReplicaFaults {
			return nil, nil
		}
		var free []*replica
		for _, r := range n.w.replicas {
			if !n.busy[r.id] {
				free = append(free, r)
			}
		}
		if len(free) == 0 {
			return nil, nil
		}
		r := free[n.rnd.Intn(len(free))]
		f.Target = r.id
		n.busy[r.id] = true
		var apply func() error
		switch kind {
		case kindKill:
			apply = func() error { return n.kill(r, f) }
		case kindStop:
			f.Length = n.between(3*time.Second, 25*time.Second)
			f.Note = "for " + f.Length.Round(time.Millisecond).String()
			apply = func() error { return n.stop(r, f.Length) }
		case kindCut:
			f.Length = n.between(3*time.Second, 25*time.Second)
			reset := n.rnd.Intn(2) == 0
			f.Note = "black hole for " + f.Length.Round(time.Millisecond).String()
			if reset {
				f.Note = "reset and black hole for " + f.Length.Round(time.Millisecond).String()
			}
			apply = func() error { return n.cut(r, f.Length, reset) }
		case kindTerminate:
			apply = func() error { return n.terminate(r, f) }
		case kindDrain:
			apply = func() error { return n.drain(r, f) }
		case kindClock:
			off := n.between(3*time.Second, 30*time.Second)
			if n.rnd.Intn(2) == 0 {
				off = -off
			}
			f.Length = n.between(5*time.Second, 15*time.Second)
			f.Note = fmt.Sprintf("offset %s for %s", off.Round(time.Millisecond), f.Length.Round(time.Millisecond))
			apply = func() error { return n.clock(r, off, f.Length, f) }
		}
		return n.record(f), apply
	}
	switch kind {
	case kindPGRestart, kindPromote:
		if n.dbBusy {
			return nil, nil
		}
		n.dbBusy = true
		if kind == kindPGRestart {
			return n.record(f), func() error { return n.dbFault(n.pair.restartPrimary) }
		}
		return n.record(f), func() error { return n.dbFault(n.pair.promote) }
	case kindLeaseAdd:
		n.nextX++
		name := fmt.Sprintf("x%02d", n.nextX)
		f.Note = name
		return n.record(f), func() error {
			err := n.command("leases", "add", name, "--yes", "--reason", "nemesis")
			if err == nil {
				n.mu.Lock()
				n.extras = append(n.extras, name) // removable once added
				n.mu.Unlock()
			}
			return err
		}
	case kindLeaseRm:
		if len(n.extras) == 0 {
			return nil, nil // waits for a leases add
		}
		i := n.rnd.Intn(len(n.extras))
		name := n.extras[i]
		n.extras = append(n.extras[:i], n.extras[i+1:]...)
		f.Note = name
		return n.record(f), func() error { return n.command("leases", "remove", name, "--yes", "--reason", "nemesis") }
	}
	panic("unknown fault kind " + kind)
}

// phase notes in f how long after its start a step ended.
func (n *nemesis) phase(f *fault, step string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f.Note = strings.TrimSpace(f.Note + fmt.Sprintf(" %s +%.1fs", step, time.Since(f.Start).Seconds()))
}

// record numbers f, stamps its start and logs it; n.mu is held.
func (n *nemesis) record(f *fault) *fault {
	n.counter++
	f.ID = n.counter
	f.Start = time.Now()
	n.faults = append(n.faults, f)
	n.t.Logf("nemesis: start %s", f)
	return f
}

// pause waits d: the length of a fault, not a synchronisation.
func pause(d time.Duration) {
	t := time.NewTimer(d)
	<-t.C
}

// restartTimeout bounds a replica's way back (gone, started, ready).
const restartTimeout = 2 * time.Minute

// kill sends SIGKILL, waits until the database counts the id as gone,
// and starts it again.
func (n *nemesis) kill(r *replica, f *fault) error {
	p := r.current()
	if err := p.Kill(); err != nil {
		return err
	}
	if err := waitExit(p, replicaproc.ExitTimeout); err != nil {
		return err
	}
	if err := waitGone(n.admin, r.id, restartTimeout); err != nil {
		return err
	}
	n.phase(f, "gone")
	return n.restart(r, 0, f)
}

// startTries is how often a restart is tried, as a supervisor
// (systemd's Restart=on-failure, a pod's restart) would.
const startTries = 10

// restart starts r again and waits until it is ready, starting it again
// when it exits first (each such exit is noted in f).
func (n *nemesis) restart(r *replica, offset time.Duration, f *fault) error {
	var err error
	for try := 0; try < startTries; try++ {
		n.w.start(r, offset)
		if err = waitReady(r.current(), restartTimeout); err == nil {
			n.phase(f, "ready")
			return nil
		}
		if !r.current().Exited() {
			return err
		}
		n.mu.Lock()
		f.Restarts++
		f.Note = strings.TrimSpace(f.Note + fmt.Sprintf(" (start %d exited: %s)", try+1, lastLine(r.current().Stderr())))
		n.mu.Unlock()
		pause(2 * time.Second)
	}
	return err
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	l := lines[len(lines)-1]
	if len(l) > 300 {
		l = l[:300] + "..."
	}
	return l
}

// stop sends SIGSTOP, waits d, and sends SIGCONT.
func (n *nemesis) stop(r *replica, d time.Duration) error {
	p := r.current()
	if err := p.SignalErr(syscall.SIGSTOP); err != nil {
		return err
	}
	pause(d)
	return p.SignalErr(syscall.SIGCONT)
}

// cut black-holes both of r's proxies (after resetting every connection,
// with reset) for d, then heals them.
func (n *nemesis) cut(r *replica, d time.Duration, reset bool) error {
	for _, px := range r.proxies {
		px.Blackhole()
		if reset {
			px.CutAll()
		}
	}
	pause(d)
	for _, px := range r.proxies {
		px.Restore()
	}
	return nil
}

// terminate ends every backend of r (its application_name is its id),
// retried while the database does not answer (another fault may restart
// it).
func (n *nemesis) terminate(r *replica, f *fault) error {
	var err error
	deadline := time.Now().Add(restartTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		var k int
		err = n.admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, r.id).Scan(&k)
		cancel()
		if err == nil {
			n.mu.Lock()
			f.Note = fmt.Sprintf("%d backends", k)
			n.mu.Unlock()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		pause(time.Second)
	}
}

// drain asks r to drain (replicas drain), waits for its exit, and starts
// it again.
func (n *nemesis) drain(r *replica, f *fault) error {
	p := r.current()
	if err := n.command("replicas", "drain", r.id, "--yes", "--reason", "nemesis"); err != nil && !p.Exited() {
		return err // the request was not written: the replica runs on
	}
	n.phase(f, "requested")
	if err := waitExit(p, restartTimeout); err != nil {
		return err
	}
	n.phase(f, "exited")
	return n.restart(r, 0, f)
}

// clock stops r (SIGTERM), starts it with its clock off by off, keeps it
// so for d, and starts it again on time.
func (n *nemesis) clock(r *replica, off, d time.Duration, f *fault) error {
	for _, o := range []time.Duration{off, 0} {
		p := r.current()
		if err := p.SignalErr(syscall.SIGTERM); err != nil {
			return err
		}
		if err := waitExit(p, restartTimeout); err != nil {
			return err
		}
		n.phase(f, "exited")
		if err := n.restart(r, o, f); err != nil {
			return err
		}
		if o != 0 {
			pause(d)
		}
	}
	return nil
}

// dbFault runs a database fault.
func (n *nemesis) dbFault(do func(context.Context) error) error {
	// A base backup has taken more than 3 minutes at load 50.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	return do(ctx)
}

// command runs a studioctl command against the pair, retried for a while
// (a command may meet a database that a fault just restarted).
func (n *nemesis) command(args ...string) error {
	var last string
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		out, errOut, code := n.runCommand(args...)
		if code == 0 {
			return nil
		}
		last = fmt.Sprintf("exit %d: %s%s", code, out, errOut)
		n.t.Logf("nemesis: studioctl %v: %s", args, lastLine(last))
		pause(time.Second)
	}
	return fmt.Errorf("studioctl %v: %s", args, last)
}

// commandTimeout bounds one studioctl command: on a loaded 2-core machine
// a race-enabled command has taken more than replicaproc's 30 s.
const commandTimeout = 2 * time.Minute

// runCommand runs studioctl args against the pair (replicaproc's RunEnv,
// with a longer deadline and without failing the test, since the nemesis
// calls it from its own goroutines).
func (n *nemesis) runCommand(args ...string) (stdout, stderr string, code int) {
	dir, err := os.MkdirTemp("", "nemesis-cmd-")
	if err != nil {
		return "", err.Error(), -1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, studioctlBin.Path, args...)
	cmd.Dir = dir
	cmd.Env = studioctlBin.Env(dir, "STUDIO_DATABASE_URL="+n.pair.URL())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil && cmd.ProcessState == nil {
		return out.String(), errb.String() + err.Error(), -1
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}
