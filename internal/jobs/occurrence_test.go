package jobs

import (
	"testing"
	"time"
)

func TestOccurrenceKeyIsTheSameStringForTheSameInstant(t *testing.T) {
	at := time.Date(2026, 12, 5, 2, 0, 0, 123456789, time.FixedZone("CET", 3600))
	if got, want := FormatNominal(at), "2026-12-05T01:00:00.123Z"; got != want {
		t.Fatalf("FormatNominal = %q, want %q", got, want)
	}
	if got, want := OccurrenceKey("nightly", "", at), "nightly//2026-12-05T01:00:00.123Z"; got != want {
		t.Fatalf("OccurrenceKey = %q, want %q", got, want)
	}
	if got, want := OccurrenceKey("sync", "eu-1", at.Add(time.Microsecond)), "sync/eu-1/2026-12-05T01:00:00.123Z"; got != want {
		t.Fatalf("OccurrenceKey = %q, want %q", got, want)
	}
	if !Nominal(at).Equal(time.Date(2026, 12, 5, 1, 0, 0, 123000000, time.UTC)) {
		t.Fatalf("Nominal(%v) = %v", at, Nominal(at))
	}
}
