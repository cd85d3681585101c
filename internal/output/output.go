// Package output prints what list commands return: on a terminal an aligned
// table drawn by tablewriter, with colour (lipgloss) and relative times;
// piped, tab-separated lines with RFC 3339 times; or a stable JSON/YAML
// document. Colour is decided once per writer. See docs/output.md.
package output

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
	"gopkg.in/yaml.v3"
)

// Format is the value of -o/--output.
type Format string

const (
	Table Format = "table"
	Wide  Format = "wide"
	JSON  Format = "json"
	YAML  Format = "yaml"
)

// Formats lists the accepted values of -o.
var Formats = []Format{Table, Wide, JSON, YAML}

// ErrFormat marks an unknown -o value.
var ErrFormat = fmt.Errorf("unknown output format")

// ParseFormat checks an -o value.
func ParseFormat(s string) (Format, error) {
	for _, f := range Formats {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("%w %q for -o/--output: want table, wide, json or yaml", ErrFormat, s)
}

// Tone colours a table cell on a terminal.
type Tone int

const (
	Plain Tone = iota
	Good       // green: live, ready, ok, free
	Warn       // yellow: draining, stale, expiring
	Bad        // red: gone, crashed, failing
	Dim        // grey: unknown, stopped
)

// Cell is one table cell.
type Cell struct {
	Text string
	Tone Tone
}

// Column is one table column; Wide columns show only with -o wide.
type Column struct {
	Header string
	Wide   bool
}

// Printer writes one kind of output to one writer.
type Printer struct {
	w      io.Writer
	format Format
	tty    bool // relative times, and colour unless disabled
	color  bool
	now    func() time.Time
	styles map[Tone]lipgloss.Style
	wrap   map[Tone][2]string // each tone's codes before and after a cell
	bold   [2]string          // the header's
	// capture, when set (NewCapture), keeps the table instead of writing it.
	capture *Captured
}

// Options for New.
type Options struct {
	Terminal bool             // the writer is a terminal (or a test forces terminal mode)
	NoColor  bool             // --no-color or NO_COLOR
	Now      func() time.Time // for relative times; time.Now if nil
}

// New returns a Printer for w.
func New(w io.Writer, format Format, o Options) *Printer {
	p := &Printer{w: w, format: format, tty: o.Terminal, color: o.Terminal && !o.NoColor, now: o.Now}
	if p.now == nil {
		p.now = time.Now
	}
	r := lipgloss.NewRenderer(w)
	if p.color {
		r.SetColorProfile(termenv.ANSI)
	} else {
		r.SetColorProfile(termenv.Ascii)
	}
	p.styles = map[Tone]lipgloss.Style{
		Plain: r.NewStyle(),
		Good:  r.NewStyle().Foreground(lipgloss.Color("2")),
		Warn:  r.NewStyle().Foreground(lipgloss.Color("3")),
		Bad:   r.NewStyle().Foreground(lipgloss.Color("1")).Bold(true),
		Dim:   r.NewStyle().Foreground(lipgloss.Color("8")),
	}
	p.wrap = make(map[Tone][2]string, len(p.styles))
	for t, st := range p.styles {
		p.wrap[t] = wrapOf(st)
	}
	p.bold = wrapOf(p.styles[Plain].Bold(true))
	return p
}

// Format is the printer's output format.
func (p *Printer) Format() Format { return p.format }

// Terminal reports whether output goes to a terminal.
func (p *Printer) Terminal() bool { return p.tty }

// Structured reports whether the format is JSON or YAML.
func (p *Printer) Structured() bool { return p.format == JSON || p.format == YAML }

// Print writes data as JSON or YAML, or the table built from cols and rows.
// data must carry json and yaml tags with the same names.
func (p *Printer) Print(data any, cols []Column, rows [][]Cell) error {
	switch p.format {
	case JSON:
		enc := json.NewEncoder(p.w)
		enc.SetIndent("", "  ")
		return enc.Encode(data)
	case YAML:
		enc := yaml.NewEncoder(p.w)
		enc.SetIndent(2)
		if err := enc.Encode(data); err != nil {
			return err
		}
		return enc.Close()
	default:
		if p.capture != nil {
			p.capture.Columns, p.capture.Rows = cols, rows
			return nil
		}
		return p.table(cols, rows)
	}
}

// JSONLine writes v as one line of JSON (for streams such as events --follow).
func (p *Printer) JSONLine(v any) error {
	return json.NewEncoder(p.w).Encode(v)
}

// table writes the rows: tab-separated when piped, an aligned and coloured
// table on a terminal.
func (p *Printer) table(cols []Column, rows [][]Cell) error {
	keep := make([]int, 0, len(cols))
	for i, c := range cols {
		if c.Wide && p.format != Wide {
			continue
		}
		keep = append(keep, i)
	}
	if !p.tty {
		return p.tsv(cols, rows, keep)
	}
	return p.aligned(cols, rows, keep)
}

// tsv writes one line per row, cells separated by tabs, as gh does when
// piped: no width measurement, no colour, empty cells empty, so awk -F'\t'
// and cut -f split any value, spaces included. A tab or newline inside a
// value becomes a space.
func (p *Printer) tsv(cols []Column, rows [][]Cell, keep []int) error {
	w := bufio.NewWriterSize(p.w, 64<<10)
	for k, i := range keep {
		if k > 0 {
			w.WriteByte('\t')
		}
		w.WriteString(cols[i].Header)
	}
	w.WriteByte('\n')
	for _, r := range rows {
		for k, i := range keep {
			if k > 0 {
				w.WriteByte('\t')
			}
			w.WriteString(Safe(tsvEscaper.Replace(r[i].Text)))
		}
		w.WriteByte('\n')
	}
	return w.Flush()
}

var tsvEscaper = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ")

// Safe returns text with every control character shown as an escape
// (\x1b, \u202e) instead of sent to the terminal: C0 and C1 controls, DEL,
// and the bidirectional overrides and isolates. Values in the tables come
// from rows that other roles write (a Java node's locked_by, a job's
// error), so a row must not be able to clear the screen, set the window
// title or reorder what an operator reads. Text without such characters
// comes back as it is, without allocating. A byte that is not UTF-8 is
// shown as \xNN too (0x9b alone is CSI to some terminals).
func Safe(text string) string {
	i := 0
	for i < len(text) {
		c := text[i]
		if c >= 0x20 && c < 0x7f {
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(text[i:])
		if unsafeRune(r) || r == utf8.RuneError && size == 1 {
			break
		}
		i += size
	}
	if i == len(text) {
		return text
	}
	var b strings.Builder
	b.Grow(len(text) + 8)
	b.WriteString(text[:i])
	for rest := text[i:]; rest != ""; {
		r, size := utf8.DecodeRuneInString(rest)
		raw := rest[:size]
		rest = rest[size:]
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, "\\x%02x", raw[0]) // not UTF-8: shown as the byte it is
		case !unsafeRune(r):
			b.WriteString(raw)
		case r < 0x100:
			fmt.Fprintf(&b, "\\x%02x", r)
		default:
			fmt.Fprintf(&b, "\\u%04x", r)
		}
	}
	return b.String()
}

// unsafeRune: a control character, or one that reorders text on display.
func unsafeRune(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true
	}
	return false
}

// columnGap separates columns of a terminal table.
const columnGap = "   "

// aligned draws the table with tablewriter: no borders, columns separated
// by three spaces, a bold header and coloured cells (lipgloss) unless colour
// is off. An empty cell shows "-" so the columns stay readable.
func (p *Printer) aligned(cols []Column, rows [][]Cell, keep []int) error {
	// Three spaces after every column but the last, so lines have no
	// trailing blanks.
	pad := make([]tw.Padding, len(keep))
	for k := range pad {
		pad[k] = tw.Padding{Right: columnGap, Overwrite: true}
	}
	if len(pad) > 0 {
		pad[len(pad)-1] = tw.PaddingNone
	}
	var buf bytes.Buffer
	t := tablewriter.NewTable(&buf,
		tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{
			Borders:  tw.BorderNone,
			Settings: tw.Settings{Separators: tw.SeparatorsNone, Lines: tw.LinesNone},
		})),
		tablewriter.WithConfig(tablewriter.Config{
			Header: tw.CellConfig{
				Formatting: tw.CellFormatting{AutoFormat: tw.Off, AutoWrap: tw.WrapNone},
				Alignment:  tw.CellAlignment{Global: tw.AlignLeft},
				Padding:    tw.CellPadding{Global: tw.PaddingNone, PerColumn: pad},
			},
			Row: tw.CellConfig{
				Formatting: tw.CellFormatting{AutoFormat: tw.Off, AutoWrap: tw.WrapNone},
				Alignment:  tw.CellAlignment{Global: tw.AlignLeft},
				Padding:    tw.CellPadding{Global: tw.PaddingNone, PerColumn: pad},
			},
			Behavior: tw.Behavior{TrimSpace: tw.Off},
		}),
	)
	hdr := make([]any, len(keep))
	for k, i := range keep {
		hdr[k] = p.style(Plain, true, cols[i].Header)
	}
	t.Header(hdr...)
	for _, r := range rows {
		line := make([]string, len(keep))
		for k, i := range keep {
			text := Safe(r[i].Text)
			if text == "" {
				text = "-"
			}
			line[k] = p.style(r[i].Tone, false, text)
		}
		if err := t.Append(line); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	// The last column is padded to its width; lines end without blanks.
	w := bufio.NewWriter(p.w)
	for line := range bytes.Lines(buf.Bytes()) {
		w.Write(bytes.TrimRight(line, " \n"))
		w.WriteByte('\n')
	}
	return w.Flush()
}

// style colours text for a terminal table, or returns it as it is. The
// codes are lipgloss's, rendered once per tone (wrap) and put around each
// cell: rendering every cell through lipgloss costs more than the table.
func (p *Printer) style(tone Tone, bold bool, text string) string {
	switch {
	case !p.color:
		return text
	case bold:
		return p.bold[0] + text + p.bold[1]
	case tone != Plain:
		w := p.wrap[tone]
		return w[0] + text + w[1]
	}
	return text
}

// wrapOf splits a style's rendering of a marker into the codes before and
// after it.
func wrapOf(st lipgloss.Style) [2]string {
	const marker = "\x00"
	before, after, _ := strings.Cut(st.Render(marker), marker)
	return [2]string{before, after}
}

// Time renders t for a table: "12s ago" / "in 30s" on a terminal, RFC 3339
// UTC otherwise. The zero time renders as "".
func (p *Printer) Time(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	if !p.tty {
		return t.UTC().Format(time.RFC3339)
	}
	d := p.now().Sub(t)
	if d >= 0 {
		return Duration(d) + " ago"
	}
	return "in " + Duration(-d)
}

// TimePtr is Time for an optional time.
func (p *Printer) TimePtr(t *time.Time) string {
	if t == nil {
		return ""
	}
	return p.Time(*t)
}

// Duration renders d compactly: 850ms, 12s, 4m10s, 3h5m, 2d4h.
func Duration(d time.Duration) string {
	if d < 0 {
		return "-" + Duration(-d)
	}
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}
