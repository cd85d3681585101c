package jobstore_test

import (
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/jobstore"
)

// The job.schedule signal carries the end RecordEnd wrote and the run's
// start, so a replica moves its timer without reading the row
// (docs/schedules.md, "Designated replica").
func TestTheEndSignalCarriesTheEndRecorded(t *testing.T) {
	t.Parallel()
	pool, url := newPool(t)
	conn := listen(t, url)
	s := jobstore.NewSchedules(pool)
	started := time.Date(2026, 12, 6, 3, 0, 0, 123456000, time.UTC)
	end, err := s.RecordEnd(t.Context(), "sweep", "web-1", 7, started)
	if err != nil {
		t.Fatal(err)
	}
	m := nextMessage(t, conn)
	gotEnd, gotStarted, ok := jobstore.EndOf(m)
	if !ok || m.Key != "sweep" || !gotEnd.Equal(end) || !gotStarted.Equal(started) {
		t.Fatalf("heard %+v: end %v, started %v, ok %v; want sweep's end %v and start %v", m, gotEnd, gotStarted, ok, end, started)
	}
}

// An older replica's signal has no end: EndOf says to read the row.
func TestAnEndSignalWithoutAnEndIsReadFromTheRow(t *testing.T) {
	t.Parallel()
	for _, m := range []bus.Message{
		bus.Signal(jobstore.KindJobSchedule, "sweep"),
		{V: 1, Type: bus.TypeSignal, Kind: jobstore.KindJobSchedule, Key: "sweep", End: "yesterday"},
		{V: 1, Type: bus.TypeSignal, Kind: bus.KindJobSettings, Key: "sweep", End: "2026-12-06T03:00:00Z"},
	} {
		if _, _, ok := jobstore.EndOf(m); ok {
			t.Errorf("EndOf(%+v) ok; want a read of the row", m)
		}
	}
}

// LoadRunAnnouncing reads what LoadRun reads and signals job.started in the
// same statement.
func TestLoadRunAnnouncingSignalsTheStart(t *testing.T) {
	t.Parallel()
	pool, url := newPool(t)
	conn := listen(t, url)
	s := jobstore.NewSchedules(pool)
	ctx := t.Context()
	if _, err := s.RecordEnd(ctx, "sweep", "web-1", 7, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if m := nextMessage(t, conn); m.Kind != jobstore.KindJobSchedule {
		t.Fatalf("heard %+v; want the end signal first", m)
	}
	wantEnd, wantStarted, _, err := s.LoadRun(ctx, "sweep")
	if err != nil {
		t.Fatal(err)
	}
	end, started, now, err := s.LoadRunAnnouncing(ctx, "sweep")
	if err != nil || !end.Equal(wantEnd) || !started.Equal(wantStarted) || now.Before(end) {
		t.Fatalf("LoadRunAnnouncing = %v, %v, %v, %v; want LoadRun's %v, %v", end, started, now, err, wantEnd, wantStarted)
	}
	if m := nextMessage(t, conn); m.Type != bus.TypeSignal || m.Kind != jobstore.KindJobStarted || m.Key != "sweep" {
		t.Fatalf("heard %+v; want the job.started signal of sweep", m)
	}
}
