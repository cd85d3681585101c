package runner_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/tasks"
)

// occMem is the memory store that also records occurrences.
type occMem struct {
	*memStore
	mu  sync.Mutex
	occ []jobs.OccurrenceRecord
}

func (o *occMem) PutOccurrence(rec jobs.OccurrenceRecord) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.occ = append(o.occ, rec)
}

func (o *occMem) OccurrenceStart(context.Context, []string) (map[string]bool, map[string]jobs.StartTrace, error) {
	return nil, nil, nil
}

// paused is the nominal times recorded skipped/paused.
func (o *occMem) paused() []time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []time.Time
	for _, r := range o.occ {
		if r.Reason == jobs.ReasonPaused {
			out = append(out, r.NominalAt)
		}
	}
	return out
}

// pauseEnder is the memory settings with a pause watch: EndPauses resumes
// the pauses whose end passed, as jobstore.EndPauses does, and counts its
// calls.
type pauseEnder struct {
	*memStore
	mu     sync.Mutex
	calls  int
	actors []string
	ended  []string
	err    error // EndPauses fails with it
	// failedAt is when it failed (bubble time).
	failedAt []string
}

func (p *pauseEnder) EndPauses(_ context.Context, actor string) ([]string, error) {
	if p.err != nil {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.calls++
		p.failedAt = append(p.failedAt, time.Now().Format(time.TimeOnly))
		return nil, p.err
	}
	p.memStore.mu.Lock()
	var ids []string
	now := time.Now()
	for id, s := range p.memStore.settings {
		if s.Paused && !s.PausedUntil.IsZero() && !now.Before(s.PausedUntil) {
			p.memStore.settings[id] = jobs.Setting{JobID: id, UpdatedBy: actor}
			ids = append(ids, id)
		}
	}
	p.memStore.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	p.actors = append(p.actors, actor)
	p.ended = append(p.ended, ids...)
	return ids, nil
}

func (p *pauseEnder) NextPauseEnd() (time.Time, bool) {
	p.memStore.mu.Lock()
	defer p.memStore.mu.Unlock()
	var next time.Time
	for _, s := range p.memStore.settings {
		if s.Paused && !s.PausedUntil.IsZero() && (next.IsZero() || s.PausedUntil.Before(next)) {
			next = s.PausedUntil
		}
	}
	return next, !next.IsZero()
}

func (p *pauseEnder) counts() (int, []string, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls, slices.Clone(p.actors), slices.Clone(p.ended)
}

// A pause whose end passed is over for the runner even when nobody wrote
// the resume (every replica down at the end, or the resume failing): the
// due times before the end are skipped/paused, the first one from the end
// on runs.
func TestAPauseIsOverAtItsEndEvenWithoutAResumeWritten(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t)
		store := &occMem{memStore: e.mem}
		ft := e.task()
		o := e.options(e.job("nightly", jobs.ScopeInstance, 10*time.Second, ft))
		o.Store = store
		r := e.start(o)
		start := time.Now()
		synctest.Wait()
		ft.finish(t, tasks.Result{})
		e.idleAt("nightly", start.Add(10*time.Second))

		// Paused by ana until 25 s: due at 10 and 20 s, not at 30.
		e.mem.set(jobs.Setting{JobID: "nightly", Paused: true, PausedBy: "ana", PausedUntil: start.Add(25 * time.Second)})
		r.SettingsChanged("nightly")
		synctest.Wait()
		if !status(t, r, "nightly").Paused {
			t.Fatal("not paused after its setting changed")
		}
		e.advance(10 * time.Second)
		e.advance(10 * time.Second)
		if n := ft.startCount(); n != 1 {
			t.Fatalf("%d runs started during the pause; want 1 (before it)", n)
		}
		e.advance(10 * time.Second)
		if n := ft.startCount(); n != 2 {
			t.Fatalf("%d runs started after the pause's end; want 2", n)
		}
		if got, want := ft.start(1), start.Add(30*time.Second); !got.Equal(want) {
			t.Errorf("the run after the end started at %s; want %s", got.Format(time.TimeOnly), want.Format(time.TimeOnly))
		}
		if st := status(t, r, "nightly"); st.Paused {
			t.Error("status still paused after the end")
		}
		ft.finish(t, tasks.Result{})
		e.idleAt("nightly", start.Add(40*time.Second))
		want := []time.Time{start.Add(10 * time.Second), start.Add(20 * time.Second)}
		if got := store.paused(); !slices.EqualFunc(got, want, time.Time.Equal) {
			t.Errorf("skipped/paused due times = %v; want %v (none from the end on)", got, want)
		}
	})
}

// The pause watch writes the resume at the end, once, as this replica
// (jobs.PauseEndActor), and the job runs then: its due time passed during
// the pause, as after any resume.
func TestThePauseWatchResumesAtTheEndOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t)
		settings := &pauseEnder{memStore: e.mem}
		ft := e.task()
		o := e.options(e.job("hourly", jobs.ScopeInstance, time.Hour, ft))
		o.Settings = settings
		start := time.Now()
		e.mem.set(jobs.Setting{JobID: "hourly", Paused: true, PausedBy: "ana", PausedUntil: start.Add(90 * time.Minute)})
		r := e.start(o)
		synctest.Wait()
		if n := ft.startCount(); n != 0 {
			t.Fatalf("%d runs while paused", n)
		}
		e.advance(90*time.Minute - time.Second)
		if calls, _, _ := settings.counts(); calls != 0 || ft.startCount() != 0 {
			t.Fatalf("before the end: %d resumes tried, %d runs; want none", calls, ft.startCount())
		}
		e.advance(time.Second)
		calls, actors, ended := settings.counts()
		if calls != 1 || !slices.Equal(ended, []string{"hourly"}) || actors[0] != jobs.PauseEndActor(replicaID) {
			t.Fatalf("at the end: %d resumes (%v by %v); want one of hourly by %s", calls, ended, actors, jobs.PauseEndActor(replicaID))
		}
		if n := ft.startCount(); n != 1 {
			t.Fatalf("%d runs at the end; want 1 (its 1 h due time passed during the pause)", n)
		}
		if got, want := ft.start(0), start.Add(90*time.Minute); !got.Equal(want) {
			t.Errorf("run at %s; want %s", got.Format(time.TimeOnly), want.Format(time.TimeOnly))
		}
		ft.finish(t, tasks.Result{})
		e.idleAt("hourly", start.Add(150*time.Minute))
		if status(t, r, "hourly").Paused {
			t.Error("status still paused after the resume")
		}
		// Nothing left to end: no more resumes.
		e.advance(10 * time.Minute)
		if calls, _, _ := settings.counts(); calls != 1 {
			t.Errorf("%d resumes tried in all; want 1", calls)
		}
	})
}

// A resume that cannot be written (a role without EXECUTE on
// studio_end_pauses, the database down) is tried again every 10 s, with
// one warning, and the job runs at the end anyway.
func TestAResumeThatCannotBeWrittenIsRetriedQuietlyAndTheJobRunsAnyway(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t)
		settings := &pauseEnder{memStore: e.mem, err: errBoom}
		ft := e.task()
		o := e.options(e.job("often", jobs.ScopeInstance, 10*time.Second, ft))
		o.Settings = settings
		start := time.Now()
		e.mem.set(jobs.Setting{JobID: "often", Paused: true, PausedBy: "ana", PausedUntil: start.Add(15 * time.Second)})
		e.start(o)
		e.advance(15 * time.Second)
		e.advance(5 * time.Second) // due at 20 s: after the end
		if n := ft.startCount(); n != 1 {
			t.Fatalf("%d runs after the end with the resume unwritten; want 1", n)
		}
		ft.finish(t, tasks.Result{})
		e.advance(60 * time.Second) // to 80 s; the run due at 30 s is left going
		calls, _, _ := settings.counts()
		settings.mu.Lock()
		at := slices.Clone(settings.failedAt)
		settings.mu.Unlock()
		if calls != 7 {
			t.Errorf("%d resumes tried from the end at 15 s to 80 s (%v); want 7, one every 10 s", calls, at)
		}
		if n := strings.Count(e.logs.String(), "writing the resume of an ended pause failed"); n != 1 {
			t.Errorf("%d warnings; want 1 for the failing streak:\n%s", n, e.logs.String())
		}
	})
}
