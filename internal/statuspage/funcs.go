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
	"deref": func(t *time.Time) time.Time {
		if t == nil {
			return time.Time{}
		}
		return *t
	},
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
	case "ready", "ok", "succeeded", "live", "held":
		return "good"
	case "running", "starting", "draining", "moving":
		return "info"
	case "stalled", "paused", "expired", "stale", "unknown", "interrupted":
		return "warn"
	case "failing", "failed", "timed_out", "lock_lost", "invalid-schedule", "crashed", "gone":
		return "bad"
	default:
		return "dim"
	}
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
