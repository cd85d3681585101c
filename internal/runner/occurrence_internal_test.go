package runner

import (
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
)

func TestTheSharedGridOfDueTimes(t *testing.T) {
	end := time.Date(2031, 3, 14, 9, 0, 0, 300_000_000, time.UTC)
	every, err := jobs.Every(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cron, err := jobs.ParseCron("*/5 * * * *")
	if err != nil {
		t.Fatal(err)
	}
	at := func(d time.Duration) time.Time { return end.Add(d) }
	min5 := func(m int) time.Time { return time.Date(2031, 3, 14, 9, m, 0, 0, time.UTC) }
	for _, c := range []struct {
		name string
		got  time.Time
		want time.Time
	}{
		{"every: before the first due time there is none", gridLast(every, end, at(9*time.Second)), time.Time{}},
		{"every: the first due time", gridLast(every, end, at(10*time.Second)), at(10 * time.Second)},
		{"every: the latest that has come", gridLast(every, end, at(35*time.Second)), at(30 * time.Second)},
		{"every: the next after a due time", gridNext(every, end, at(30*time.Second)), at(40 * time.Second)},
		{"every: the next before the end", gridNext(every, end, at(-time.Hour)), at(10 * time.Second)},
		{"cron: the latest that has come", gridLast(cron, end, min5(17)), min5(15)},
		{"cron: none yet", gridLast(cron, end, min5(4)), time.Time{}},
		{"cron: the next", gridNext(cron, end, min5(15)), min5(20)},
	} {
		if !c.got.Equal(c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	for _, c := range []struct {
		name                    string
		s                       jobs.Schedule
		from, to                time.Time
		n                       int
		first, last, beforeLast time.Time
	}{
		{"every: twelve due times", every, at(0), at(125 * time.Second), 12, at(10 * time.Second), at(120 * time.Second), at(110 * time.Second)},
		{"every: from a time off the grid", every, at(15 * time.Second), at(40 * time.Second), 3, at(20 * time.Second), at(40 * time.Second), at(30 * time.Second)},
		{"every: one", every, at(0), at(10 * time.Second), 1, at(10 * time.Second), at(10 * time.Second), time.Time{}},
		{"every: none", every, at(0), at(9 * time.Second), 0, time.Time{}, time.Time{}, time.Time{}},
		{"cron: three", cron, end, min5(16), 3, min5(5), min5(15), min5(10)},
	} {
		n, first, last, beforeLast := gridSpan(c.s, end, c.from, c.to)
		if n != c.n || !first.Equal(c.first) || !last.Equal(c.last) || !beforeLast.Equal(c.beforeLast) {
			t.Errorf("%s: %d, %v, %v, %v; want %d, %v, %v, %v", c.name, n, first, last, beforeLast, c.n, c.first, c.last, c.beforeLast)
		}
	}
}
