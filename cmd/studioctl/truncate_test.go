package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/output"
)

// The ERROR and OUTPUT cells are cut by output.Truncate: at most their
// width in display columns, never in the middle of a character.
func TestTruncatedCellsNeverSplitACharacter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cut   func(string) string
		width int
		in    string
		want  string
	}{
		{"a short error stays as it is", errorCell, errorCellWidth, "boom", "boom"},
		{"an error on several lines is one line", errorCell, errorCellWidth, "boom\nagain", "boom again"},
		{"a long ASCII error keeps 77 bytes and an ellipsis", errorCell, errorCellWidth, strings.Repeat("a", 100), strings.Repeat("a", 77) + "..."},
		{"a two-byte character across byte 77 is kept whole or dropped whole", errorCell, errorCellWidth,
			strings.Repeat("a", 76) + strings.Repeat("é", 10), strings.Repeat("a", 76) + "é..."},
		{"wide characters count two columns", errorCell, errorCellWidth, strings.Repeat("日", 50), strings.Repeat("日", 38) + "..."},
		{"an emoji is not cut in half", errorCell, errorCellWidth, strings.Repeat("x", 76) + "🔥🔥🔥", strings.Repeat("x", 76) + "..."},
		{"the output cell cuts multi-byte text too", outputCell, outputCellWidth, strings.Repeat("ü", 70), strings.Repeat("ü", 57) + "..."},
		// jobs why quotes a run's error in its sentence through the same cut.
		{"jobs why keeps a short error on one line", oneLine, whyErrorWidth, "lock  lost:\n\tconnection reset", "lock lost: connection reset"},
		{"jobs why cuts a long ASCII error at 117 bytes and an ellipsis", oneLine, whyErrorWidth, strings.Repeat("a", 200), strings.Repeat("a", 117) + "..."},
		{"jobs why counts a wide character two columns", oneLine, whyErrorWidth, strings.Repeat("日", 100), strings.Repeat("日", 58) + "..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.cut(tt.in)
			if got != tt.want {
				t.Errorf("cut(%q) =\n%q\nwant\n%q", tt.in, got, tt.want)
			}
			if !utf8.ValidString(got) || output.Width(got) > tt.width {
				t.Errorf("cut(%q) = %q: valid UTF-8 %t, width %d (at most %d)", tt.in, got, utf8.ValidString(got), output.Width(got), tt.width)
			}
		})
	}
}

// Regression: jobs list and jobs history cut an error at byte 77, so a
// multi-byte character there came out as an escaped broken byte (\xc3).
func TestTruncatedErrorsPrintWholeCharactersInTheTables(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 76) + "échec: délai dépassé après 30 s"
	var out bytes.Buffer
	p := output.New(&out, output.Wide, output.Options{Now: func() time.Time { return testNow }})
	if err := printJobViews(p, []jobstore.View{{ID: "report", LastError: long}}); err != nil {
		t.Fatal(err)
	}
	started := testNow.Add(-time.Minute)
	if err := printRuns(p, []jobs.Run{{Seq: 1, JobID: "report", ReplicaID: "web-1", StartedAt: started, Outcome: jobs.OutcomeFailed, Error: long, OutputTail: strings.Repeat("ü", 70)}}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if strings.Contains(got, `\x`) || !utf8.ValidString(got) {
		t.Errorf("a character was split:\n%s", got)
	}
	if want := strings.Repeat("a", 76) + "é..."; strings.Count(got, want) != 2 {
		t.Errorf("want the error cut to %q in both tables:\n%s", want, got)
	}
}
