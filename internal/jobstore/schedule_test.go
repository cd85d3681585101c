package jobstore_test

import (
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/jobstore"
)

// RecordEnd writes the end and sends its signal in one statement, and Load
// reads the ends with the database's now in one: the listener hears the
// signal, the end only grows, and Load sees what RecordEnd wrote.
func TestRecordEndWritesAndSignalsInOneStatement(t *testing.T) {
	t.Parallel()
	pool, url := newPool(t)
	conn := listen(t, url)
	s := jobstore.NewSchedules(pool)
	ctx := t.Context()

	ends, now, err := s.Load(ctx, []string{"sweep", "never"})
	if err != nil || len(ends) != 0 || now.IsZero() {
		t.Fatalf("Load before any end = %v, %v, %v; want no ends and the database's now", ends, now, err)
	}
	started := time.Now().Add(-time.Second)
	first, err := s.RecordEnd(ctx, "sweep", "web-1", 7, started)
	if err != nil {
		t.Fatal(err)
	}
	if m := nextMessage(t, conn); m.Type != bus.TypeSignal || m.Kind != jobstore.KindJobSchedule || m.Key != "sweep" {
		t.Fatalf("heard %+v; want the job.schedule signal of sweep", m)
	}
	// A later end from another replica; the end recorded is the later.
	second, err := s.RecordEnd(ctx, "sweep", "web-2", 8, started)
	if err != nil {
		t.Fatal(err)
	}
	if m := nextMessage(t, conn); m.Kind != jobstore.KindJobSchedule || m.Key != "sweep" {
		t.Fatalf("heard %+v; want a second job.schedule signal of sweep", m)
	}
	if second.Before(first) {
		t.Fatalf("second end %v before the first %v", second, first)
	}
	ends, now, err = s.Load(ctx, []string{"sweep", "never"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ends) != 1 || !ends["sweep"].Equal(second) || now.Before(second) {
		t.Fatalf("Load = %v at %v; want sweep's end %v, and a now after it", ends, now, second)
	}
	var replica string
	var seq int64
	if err := pool.QueryRow(ctx, `SELECT last_replica_id, last_seq FROM studio_job_schedule WHERE job_id = 'sweep'`).Scan(&replica, &seq); err != nil {
		t.Fatal(err)
	}
	if replica != "web-2" || seq != 8 {
		t.Fatalf("row says %s, seq %d; want web-2, 8", replica, seq)
	}
}

// An end of 'infinity' or '-infinity' (no replica writes one: a hostile
// or corrupt row) reads as no end, for that job only.
func TestScheduleEndsThatAreNotFiniteReadAsNone(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `INSERT INTO studio_job_schedule (job_id, last_ended_at, last_started_at) VALUES
  ('past', '-infinity', '-infinity'), ('future', 'infinity', 'infinity'), ('sweep', now(), now())`); err != nil {
		t.Fatal(err)
	}
	s := jobstore.NewSchedules(pool)
	ends, _, err := s.Load(ctx, []string{"past", "future", "sweep"})
	if err != nil || len(ends) != 1 || ends["sweep"].IsZero() {
		t.Fatalf("Load = %v, %v; want sweep's end only", ends, err)
	}
	for _, job := range []string{"past", "future"} {
		end, started, now, err := s.LoadRun(ctx, job)
		if err != nil || !end.IsZero() || !started.IsZero() || now.IsZero() {
			t.Errorf("LoadRun(%s) = %v, %v, %v, %v; want no end and no start", job, end, started, now, err)
		}
	}
}
