package output

import (
	"slices"
	"testing"
)

func TestWrapBreaksAtSpacesWithinTheWidth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, text    string
		width         int
		first, indent string
		want          []string
	}{
		{"text that fits stays one line", "a short detail", 20, "  ", "  ", []string{"  a short detail"}},
		{"lines break at spaces and continue after the indent", "one two three four five", 12, "- ", "  ",
			[]string{"- one two", "  three four", "  five"}},
		{"runs of spaces collapse", "a    b\tc", 10, "", "", []string{"a b c"}},
		{"a word longer than a line is cut", "xx abcdefghijkl yy", 6, "", "", []string{"xx", "abcdef", "ghijkl", "yy"}},
		{"the cut continues after the indent", "abcdefghij", 6, "> ", "  ", []string{"> abcd", "  efgh", "  ij"}},
		{"empty text is the prefix alone", "", 10, "hint: ", "", []string{"hint: "}},
		{"wide characters count two columns", "日本語 テキスト", 8, "", "", []string{"日本語", "テキスト"}},
	} {
		if got := Wrap(tc.text, tc.width, tc.first, tc.indent); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Wrap(%q, %d) = %q, want %q", tc.name, tc.text, tc.width, got, tc.want)
		}
		for _, l := range Wrap(tc.text, tc.width, tc.first, tc.indent) {
			if Width(l) > tc.width && tc.width > Width(tc.indent) {
				t.Errorf("%s: line %q is wider than %d", tc.name, l, tc.width)
			}
		}
	}
}

func TestTruncateCutsToTheWidthWithAnEllipsis(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text  string
		width int
		want  string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"a little too long", 10, "a littl..."},
		{"日本語テキスト", 7, "日本..."},
		{"abc", 2, "ab"},
	} {
		if got := Truncate(tc.text, tc.width); got != tc.want || Width(got) > tc.width {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.text, tc.width, got, tc.want)
		}
	}
}
