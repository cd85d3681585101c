package statuspage

import (
	"fmt"
	"html/template"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/output"
)

// maxErrorRunes is how much of a job's error the page shows in a cell; the
// whole text (bounded by the run store) is in the cell's title.
const maxErrorRunes = 160

var funcs = template.FuncMap{
	"iso":   iso,
	"ms":    ms,
	"ago":   ago,
	"dur":   output.Duration,
	"tone":  tone,
	"short": short,
	"long":  long,
	"deref": func(t *time.Time) time.Time {
		if t == nil {
			return time.Time{}
		}
		return *t
	},
	"outputHref": outputHref,
	"runDuration": func(r jobs.Run) time.Duration {
		if r.FinishedAt == nil {
			return 0
		}
		return r.FinishedAt.Sub(r.StartedAt)
	},
}

func iso(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// ms is t in Unix milliseconds, which the live script counts from.
func ms(t time.Time) int64 { return t.UnixMilli() }

// ago renders t relative to now: "12s ago", "in 4m10s", "now".
func ago(t, now time.Time) string {
	d := now.Sub(t)
	switch {
	case d >= time.Second:
		return output.Duration(d.Truncate(time.Second)) + " ago"
	case d <= -time.Second:
		return "in " + output.Duration((-d).Truncate(time.Second))
	default:
		return "now"
	}
}

// tone is the CSS class of a state, outcome or health word; the word is
// always shown as text too, so nothing depends on colour alone.
func tone(s any) string {
	w := fmt.Sprint(s)
	switch w {
	case "ready", "ok", "succeeded", "live", "held", "ran":
		return "good"
	case "running", "starting", "draining", "moving":
		return "info"
	case "stalled", "paused", "expired", "stale", "unknown", "interrupted", "skipped":
		return "warn"
	case "failing", "failed", "timed_out", "lock_lost", "invalid-schedule", "crashed", "gone", "missed":
		return "bad"
	default:
		return "dim"
	}
}

// maxTitleRunes is how much of a job's error the cell's title holds: an
// error can be megabytes (a SQL job's RAISE, a command's output), and the
// page has a row per run.
const maxTitleRunes = 2000

// long is s for a title, cut to maxTitleRunes.
func long(s string) string {
	if utf8.RuneCountInString(s) <= maxTitleRunes {
		return s
	}
	r := []rune(s)
	return string(r[:maxTitleRunes]) + fmt.Sprintf("… (%d more characters: studioctl jobs history shows the whole error)", len(r)-maxTitleRunes)
}

// visible shows the characters that reorder or hide text as escapes
// (\u202e, \x1b), as the CLI does (output.Safe), everywhere in the
// rendered page: html/template escapes markup but leaves a bidirectional
// override in a lock holder or a host name, which would reorder what the
// page shows. Tabs and line breaks stay. The page's own template, style
// and script hold none of these characters, so only text from the
// database changes.
func visible(b []byte) []byte {
	i := 0
	for i < len(b) {
		r, size := utf8.DecodeRune(b[i:])
		if hidden(r) {
			break
		}
		i += size
	}
	if i == len(b) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	out = append(out, b[:i]...)
	for rest := b[i:]; len(rest) > 0; {
		r, size := utf8.DecodeRune(rest)
		switch {
		case !hidden(r):
			out = append(out, rest[:size]...)
		case r < 0x100:
			out = fmt.Appendf(out, "\\x%02x", r)
		default:
			out = fmt.Appendf(out, "\\u%04x", r)
		}
		rest = rest[size:]
	}
	return out
}

// hidden: a control character other than tab and line breaks, or one
// that reorders text on display (the set of output.Safe).
func hidden(r rune) bool {
	switch {
	case r == '\t', r == '\n', r == '\r':
		return false
	case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true
	}
	return false
}

// short is the first line of s, cut to maxErrorRunes.
func short(s string) string {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i] + " …"
	}
	if utf8.RuneCountInString(s) > maxErrorRunes {
		r := []rune(s)
		s = string(r[:maxErrorRunes]) + "…"
	}
	return s
}
