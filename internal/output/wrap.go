package output

import (
	"strings"
	"unicode/utf8"

	"github.com/mattn/go-runewidth"
)

// Width is the display width of text (East Asian wide characters count
// two columns), as the terminal table measures it.
func Width(text string) int { return runewidth.StringWidth(text) }

// Truncate cuts text to at most width columns, ending it with "..." when it
// was cut.
func Truncate(text string, width int) string {
	if Width(text) <= width {
		return text
	}
	if width <= 3 {
		return runewidth.Truncate(text, width, "")
	}
	return runewidth.Truncate(text, width, "...")
}

// Wrap breaks text into lines of at most width columns at spaces, each
// line after the first starting with indent (which counts towards width).
// A word longer than a line is cut across lines. Runs of spaces collapse.
func Wrap(text string, width int, first, indent string) []string {
	var lines []string
	line := first
	empty := true // nothing but the prefix on line yet
	for _, word := range strings.Fields(text) {
		for word != "" {
			sep := " "
			if empty {
				sep = ""
			}
			if Width(line)+len(sep)+Width(word) <= width {
				line += sep + word
				empty = false
				break
			}
			if !empty {
				lines = append(lines, line)
				line, empty = indent, true
				continue
			}
			// A word wider than a whole line: cut it.
			room := width - Width(line)
			if room < 1 {
				room = 1
			}
			head := runewidth.Truncate(word, room, "")
			if head == "" {
				_, size := utf8.DecodeRuneInString(word)
				head = word[:size]
			}
			lines = append(lines, line+head)
			line, word = indent, word[len(head):]
		}
	}
	if !empty || len(lines) == 0 {
		lines = append(lines, line)
	}
	return lines
}

// Paint colours text in tone as the terminal table would, or returns it
// as it is when the printer has no colour.
func (p *Printer) Paint(tone Tone, text string) string { return p.style(tone, false, text) }
