package runner

import (
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
)

// The plan of a catch-up (planCatchUp): which due times run, oldest
// first, and the rows of the rest, on an injected start time (to).
func TestACatchUpPlanRunsTheNewestMaxWithinTheWindowAndRecordsTheRest(t *testing.T) {
	to := time.Date(2031, 3, 14, 9, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return to.Add(d) }
	every, err := jobs.Every(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	hourly, err := jobs.ParseCron("0 * * * *")
	if err != nil {
		t.Fatal(err)
	}
	s := time.Second
	type row struct {
		what        string
		first, last time.Time
		count       int
	}
	for _, c := range []struct {
		name   string
		sched  jobs.Schedule
		anchor time.Time
		tr     jobs.StartTrace
		c      jobs.CatchUp
		caught []time.Time
		rows   []row
	}{
		// 12 due times passed: t-115s ... t-5s.
		{"max bounds the count: the newest three run, oldest first", every, at(-125 * s), jobs.StartTrace{}, jobs.CatchUp{Max: 3, Within: time.Hour},
			[]time.Time{at(-25 * s), at(-15 * s), at(-5 * s)}, []row{{"missed/down", at(-115 * s), at(-35 * s), 9}}},
		{"within bounds the age: only those of the last 30s", every, at(-125 * s), jobs.StartTrace{}, jobs.CatchUp{Max: 10, Within: 30 * s},
			[]time.Time{at(-25 * s), at(-15 * s), at(-5 * s)}, []row{{"missed/down", at(-115 * s), at(-35 * s), 9}}},
		{"a window edge on a due time takes it", every, at(-125 * s), jobs.StartTrace{}, jobs.CatchUp{Max: 10, Within: 25 * s},
			[]time.Time{at(-25 * s), at(-15 * s), at(-5 * s)}, []row{{"missed/down", at(-115 * s), at(-35 * s), 9}}},
		{"all of them fit: no row", every, at(-125 * s), jobs.StartTrace{}, jobs.CatchUp{Max: 20, Within: time.Hour},
			[]time.Time{at(-115 * s), at(-105 * s), at(-95 * s), at(-85 * s), at(-75 * s), at(-65 * s), at(-55 * s), at(-45 * s), at(-35 * s), at(-25 * s), at(-15 * s), at(-5 * s)}, nil},
		{"all but one: a row of one", every, at(-125 * s), jobs.StartTrace{}, jobs.CatchUp{Max: 11, Within: time.Hour},
			[]time.Time{at(-105 * s), at(-95 * s), at(-85 * s), at(-75 * s), at(-65 * s), at(-55 * s), at(-45 * s), at(-35 * s), at(-25 * s), at(-15 * s), at(-5 * s)},
			[]row{{"missed/down", at(-115 * s), at(-115 * s), 1}}},
		{"none within the window: all missed", every, at(-125 * s), jobs.StartTrace{}, jobs.CatchUp{Max: 3, Within: 4 * s},
			nil, []row{{"missed/down", at(-115 * s), at(-5 * s), 12}}},
		{"max 1 is run-once within the window", every, at(-125 * s), jobs.StartTrace{}, jobs.CatchUp{Max: 1, Within: time.Hour},
			[]time.Time{at(-5 * s)}, []row{{"missed/down", at(-115 * s), at(-15 * s), 11}}},
		{"still paused at the start: nothing runs", every, at(-125 * s),
			jobs.StartTrace{Pauses: []jobs.PauseChange{{At: at(-60500 * time.Millisecond), Paused: true, By: "alice"}}}, jobs.CatchUp{Max: 3, Within: time.Hour},
			nil, []row{{"missed/down", at(-115 * s), at(-65 * s), 6}, {"skipped/paused", at(-55 * s), at(-5 * s), 6}}},
		{"resumed before the start: the last part catches up", every, at(-125 * s),
			jobs.StartTrace{Pauses: []jobs.PauseChange{{At: at(-60500 * time.Millisecond), Paused: true, By: "alice"}, {At: at(-30500 * time.Millisecond), By: "bob"}}},
			jobs.CatchUp{Max: 3, Within: time.Hour},
			[]time.Time{at(-25 * s), at(-15 * s), at(-5 * s)}, []row{{"missed/down", at(-115 * s), at(-65 * s), 6}, {"skipped/paused", at(-55 * s), at(-35 * s), 3}}},
		{"after what is recorded already", every, at(-125 * s), jobs.StartTrace{Recorded: at(-45 * s)}, jobs.CatchUp{Max: 2, Within: time.Hour},
			[]time.Time{at(-15 * s), at(-5 * s)}, []row{{"missed/down", at(-35 * s), at(-25 * s), 2}}},
		// An hourly cron down from 03:30 to 09:00: 04:00 ... 09:00 passed.
		{"an hourly cron: the last four hours of six", hourly, at(-330 * time.Minute), jobs.StartTrace{}, jobs.CatchUp{Max: 4, Within: 24 * time.Hour},
			[]time.Time{at(-3 * time.Hour), at(-2 * time.Hour), at(-time.Hour), at(0)}, []row{{"missed/down", at(-5 * time.Hour), at(-4 * time.Hour), 2}}},
		{"an hourly cron within 2h30m", hourly, at(-330 * time.Minute), jobs.StartTrace{}, jobs.CatchUp{Max: 10, Within: 150 * time.Minute},
			[]time.Time{at(-2 * time.Hour), at(-time.Hour), at(0)}, []row{{"missed/down", at(-5 * time.Hour), at(-3 * time.Hour), 3}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := planCatchUp(c.sched, c.anchor, to, c.tr, true, c.c)
			if len(p.caught) != len(c.caught) {
				t.Fatalf("caught up %v; want %v", p.caught, c.caught)
			}
			for i := range c.caught {
				if !p.caught[i].Equal(c.caught[i]) {
					t.Fatalf("caught up %v; want %v (oldest first)", p.caught, c.caught)
				}
			}
			var got []row
			for _, r := range p.recs {
				got = append(got, row{r.Outcome + "/" + r.Reason, r.NominalAt, lastOf(r), max(r.Count, 1)})
			}
			if len(got) != len(c.rows) {
				t.Fatalf("rows %+v; want %+v", got, c.rows)
			}
			for i := range got {
				if got[i].what != c.rows[i].what || !got[i].first.Equal(c.rows[i].first) || !got[i].last.Equal(c.rows[i].last) || got[i].count != c.rows[i].count {
					t.Fatalf("rows %+v; want %+v", got, c.rows)
				}
			}
			// No due time is both caught up and in a row, and none is left out.
			n := len(p.caught)
			for _, r := range p.recs {
				n += max(r.Count, 1)
				for _, d := range p.caught {
					if !d.Before(r.NominalAt) && !d.After(lastOf(r)) {
						t.Errorf("%v is caught up and in the row %+v", d, r)
					}
				}
			}
			if total, _, _, _ := gridSpan(c.sched, c.anchor, c.anchor, to); c.tr.Recorded.IsZero() && n != total {
				t.Errorf("%d due times accounted for; %d passed", n, total)
			}
		})
	}
}

// gridTail counts a fixed delay's grid instead of walking it: a year of
// every 1s answers at once.
func TestGridTailOfAYearAtEverySecond(t *testing.T) {
	every, err := jobs.Every(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	first := time.Date(2030, 3, 14, 9, 0, 1, 0, time.UTC)
	last := first.Add(365 * 24 * time.Hour)
	before, tail := gridTail(every, first.Add(-time.Second), first, last, last.Add(-time.Hour), 3)
	if len(tail) != 3 || !tail[0].Equal(last.Add(-2*time.Second)) || !tail[2].Equal(last) || !before.Equal(last.Add(-3*time.Second)) {
		t.Fatalf("tail %v, before %v", tail, before)
	}
}

// The example of docs/schedules.md, "Catch-up": an hourly cron, every
// replica down from 03:30 to 09:10.
func TestTheCatchUpExampleOfTheDocs(t *testing.T) {
	hourly, err := jobs.ParseCron("0 * * * *")
	if err != nil {
		t.Fatal(err)
	}
	at := func(h, m int) time.Time { return time.Date(2031, 3, 14, h, m, 0, 0, time.UTC) }
	end, start := at(3, 0).Add(5*time.Second), at(9, 10)
	for _, c := range []struct {
		within      time.Duration
		caught      []time.Time
		first, last time.Time
		count       int
	}{
		{6 * time.Hour, []time.Time{at(6, 0), at(7, 0), at(8, 0), at(9, 0)}, at(4, 0), at(5, 0), 2},
		{150 * time.Minute, []time.Time{at(7, 0), at(8, 0), at(9, 0)}, at(4, 0), at(6, 0), 3},
	} {
		p := planCatchUp(hourly, end, start, jobs.StartTrace{}, true, jobs.CatchUp{Max: 4, Within: c.within})
		ok := len(p.caught) == len(c.caught) && len(p.recs) == 1 && p.recs[0].NominalAt.Equal(c.first) && lastOf(p.recs[0]).Equal(c.last) && p.recs[0].Count == c.count
		for i := 0; ok && i < len(c.caught); i++ {
			ok = p.caught[i].Equal(c.caught[i])
		}
		if !ok {
			t.Errorf("within %v: caught up %v, rows %+v; want %v and one missed/down of %d from %v to %v", c.within, p.caught, p.recs, c.caught, c.count, c.first, c.last)
		}
	}
}
