package demo

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// Regression: the view cut an error's first line at byte 100, which could
// split a multi-byte character.
func TestFirstLineTruncatesWithoutSplittingACharacter(t *testing.T) {
	t.Parallel()
	got := firstLine(strings.Repeat("a", 99) + strings.Repeat("é", 10) + "\nsecond line")
	if want := strings.Repeat("a", 99) + "é..."; got != want || !utf8.ValidString(got) {
		t.Errorf("firstLine = %q, want %q", got, want)
	}
	if got := firstLine("short\nsecond"); got != "short" {
		t.Errorf("firstLine = %q, want %q", got, "short")
	}
}
