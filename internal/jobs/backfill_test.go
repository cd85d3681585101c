package jobs_test

import (
	"errors"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
)

func backfillTimes(t *testing.T, s jobs.Schedule, from, to string, max int) ([]string, error) {
	t.Helper()
	occ, err := jobs.BackfillOccurrences(s, mustTime(t, from), mustTime(t, to), max)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(occ))
	for i, o := range occ {
		out[i] = o.At.Format(time.RFC3339)
		if !o.Until.After(o.At) {
			t.Errorf("occurrence %s: slot ends at %s, not after it", o.At, o.Until)
		}
		if i > 0 && !occ[i-1].Until.Equal(o.At) {
			t.Errorf("occurrence %s: the slot before it ends at %s, not at it", o.At, occ[i-1].Until)
		}
	}
	return out, nil
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestBackfillOccurrencesOfACronAreItsTimesInTheHalfOpenRange(t *testing.T) {
	s, err := jobs.ParseCron("0 * * * *")
	if err != nil {
		t.Fatal(err)
	}
	got, err := backfillTimes(t, s, "2026-11-30T01:00:00Z", "2026-11-30T04:00:00Z", 100)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"2026-11-30T01:00:00Z", "2026-11-30T02:00:00Z", "2026-11-30T03:00:00Z"}
	if !equalStrings(got, want) {
		t.Errorf("occurrences = %v, want %v (from included, to excluded)", got, want)
	}
	got, err = backfillTimes(t, s, "2026-11-30T01:00:01Z", "2026-11-30T03:00:01Z", 100)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"2026-11-30T02:00:00Z", "2026-11-30T03:00:00Z"}; !equalStrings(got, want) {
		t.Errorf("occurrences = %v, want %v", got, want)
	}
}

func TestBackfillOccurrencesOfAFixedDelayAreOnTheEpochGridWhateverFromSays(t *testing.T) {
	s, err := jobs.Every(15 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	a, err := backfillTimes(t, s, "2026-11-30T01:00:00Z", "2026-11-30T02:00:00Z", 100)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"2026-11-30T01:00:00Z", "2026-11-30T01:15:00Z", "2026-11-30T01:30:00Z", "2026-11-30T01:45:00Z"}
	if !equalStrings(a, want) {
		t.Errorf("occurrences = %v, want %v", a, want)
	}
	// A second backfill from another start finds the same times.
	b, err := backfillTimes(t, s, "2026-11-30T01:07:00Z", "2026-11-30T01:46:00Z", 100)
	if err != nil {
		t.Fatal(err)
	}
	if want := want[1:]; !equalStrings(b, want) {
		t.Errorf("occurrences from 01:07 = %v, want %v", b, want)
	}
	// A delay that does not divide a day is on the Unix epoch's grid.
	s7, _ := jobs.Every(7 * time.Minute)
	c, err := backfillTimes(t, s7, "2026-11-30T00:00:00Z", "2026-11-30T00:15:00Z", 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range c {
		if mustTime(t, at).Unix()%(7*60) != 0 {
			t.Errorf("%s is not a multiple of 7m since the Unix epoch", at)
		}
	}
	if len(c) != 2 {
		t.Errorf("occurrences of every 7m in 15 minutes = %v, want 2", c)
	}
}

func TestBackfillOccurrencesAreBoundedByMax(t *testing.T) {
	s, _ := jobs.Every(time.Second)
	got, err := backfillTimes(t, s, "2026-11-30T00:00:00Z", "2026-11-30T00:01:40Z", 100)
	if err != nil || len(got) != 100 {
		t.Fatalf("100 seconds at --max 100 = %d occurrences, %v; want 100, nil", len(got), err)
	}
	_, err = backfillTimes(t, s, "2026-11-30T00:00:00Z", "2026-11-30T00:01:41Z", 100)
	if !errors.Is(err, jobs.ErrBackfillTooMany) {
		t.Errorf("101 seconds at --max 100: %v, want ErrBackfillTooMany", err)
	}
	// Ten years of seconds stop at the bound, not after 315 million steps.
	_, err = backfillTimes(t, s, "2016-01-01T00:00:00Z", "2026-01-01T00:00:00Z", 5)
	if !errors.Is(err, jobs.ErrBackfillTooMany) {
		t.Errorf("ten years of seconds at --max 5: %v, want ErrBackfillTooMany", err)
	}
}

func TestBackfillOccurrencesOfAnEmptyOrReversedRangeAreNone(t *testing.T) {
	s, _ := jobs.ParseCron("0 * * * *")
	for _, r := range [][2]string{{"2026-11-30T02:00:00Z", "2026-11-30T02:00:00Z"}, {"2026-11-30T03:00:00Z", "2026-11-30T01:00:00Z"}} {
		got, err := backfillTimes(t, s, r[0], r[1], 100)
		if err != nil || len(got) != 0 {
			t.Errorf("[%s, %s) = %v, %v; want none", r[0], r[1], got, err)
		}
	}
	if _, err := jobs.BackfillOccurrences(jobs.Schedule{}, time.Unix(0, 0), time.Unix(3600, 0), 10); !errors.Is(err, jobs.ErrSchedule) {
		t.Errorf("no schedule: %v, want ErrSchedule", err)
	}
}

// A zoned cron's backfill follows the runner's rules on both DST nights: a
// repeated local time once, at its first instant; a skipped one at the end
// of the gap.
func TestBackfillOccurrencesOfAZonedCronFollowTheDSTRules(t *testing.T) {
	loc, err := jobs.LoadZone("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := jobs.ParseCron("30 2 * * *")
	s := c.InZone(loc)
	// Spring forward, 2026-03-29: 02:30 does not exist; it runs at 03:00
	// CEST (01:00Z), the end of the gap.
	got, err := backfillTimes(t, s, "2026-03-28T00:00:00Z", "2026-03-31T00:00:00Z", 100)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}
	if !equalStrings(got, want) {
		t.Errorf("spring forward: %v, want %v", got, want)
	}
	// Fall back, 2026-10-25: 02:30 occurs twice (00:30Z CEST, 01:30Z CET);
	// once, at the first.
	got, err = backfillTimes(t, s, "2026-10-24T00:00:00Z", "2026-10-27T00:00:00Z", 100)
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}
	if !equalStrings(got, want) {
		t.Errorf("fall back: %v, want %v", got, want)
	}
}
