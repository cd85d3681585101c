package top

import (
	"fmt"
	"io"
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/studioctl/studioctl/internal/output"
)

type outputCell = output.Cell

// Layout: the lines around the table.
const (
	// maxColumnWidth bounds a column other than the last shown, so one
	// long error does not push every other column off the screen.
	maxColumnWidth = 40
	// columnGap separates the columns, as the list commands' tables do.
	columnGap = "  "
	// cursorMark marks the selected row (visible without colour too).
	cursorMark = "> "
)

// HeaderChecks are doctor's checks the header shows, in order, with its
// labels: what the operator asks first.
var HeaderChecks = []Check{
	{Name: "crashed_replicas", Label: "crashed"},
	{Name: "stale_locks", Label: "stale"},
	{Name: "leases", Label: "unowned"},
	{Name: "failing_jobs", Label: "failing"},
	{Name: "overdue_jobs", Label: "overdue"},
	{Name: "config_drift", Label: "drift"},
}

// styles are the screen's styles, without colour codes when colour is off.
type styles struct {
	tone map[output.Tone]lipgloss.Style
	// wrap are each tone's codes before and after a cell, rendered once:
	// a style's Render per cell costs more than the rest of the frame.
	wrap     map[output.Tone][2]string
	title    lipgloss.Style
	selected lipgloss.Style
	bold     lipgloss.Style
	bad      lipgloss.Style
}

func newStyles(color bool) styles {
	r := lipgloss.NewRenderer(io.Discard)
	if color {
		r.SetColorProfile(termenv.ANSI)
	} else {
		r.SetColorProfile(termenv.Ascii)
	}
	st := styles{
		tone: map[output.Tone]lipgloss.Style{
			output.Plain: r.NewStyle(),
			output.Good:  r.NewStyle().Foreground(lipgloss.Color("2")),
			output.Warn:  r.NewStyle().Foreground(lipgloss.Color("3")),
			output.Bad:   r.NewStyle().Foreground(lipgloss.Color("1")).Bold(true),
			output.Dim:   r.NewStyle().Foreground(lipgloss.Color("8")),
		},
		title:    r.NewStyle().Reverse(true),
		selected: r.NewStyle().Reverse(true),
		bold:     r.NewStyle().Bold(true),
		bad:      r.NewStyle().Foreground(lipgloss.Color("1")).Bold(true),
	}
	st.wrap = map[output.Tone][2]string{}
	for t, s := range st.tone {
		before, after, _ := strings.Cut(s.Render("\x00"), "\x00")
		st.wrap[t] = [2]string{before, after}
	}
	return st
}

// cell is text in a tone's colour.
func (s styles) cell(t output.Tone, text string) string {
	w := s.wrap[t]
	if w[0] == "" {
		return text
	}
	return w[0] + text + w[1]
}

// bodyHeight is how many lines the table (its header included), the
// drill-down or the help have: the screen less the title, the health
// lines, the status lines and the key line.
func (m Model) bodyHeight() int {
	return max(m.height-2-m.healthDetailLines()-len(m.statusLines())-1, 2)
}

// tableRows is how many rows of the table fit under its header.
func (m Model) tableRows() int { return m.bodyHeight() - 1 }

// detailRows is how many lines of a drill-down fit under its title.
func (m Model) detailRows() int { return m.bodyHeight() - 1 }

// healthDetailLines is how many lines under the health line say what is
// wrong: one, or on a tall screen one per failing check (up to three).
func (m Model) healthDetailLines() int { return max(1, m.extraHealthLines()) }

// extraHealthLines: on a tall screen, the details of up to three failing
// checks get a line each (one on 24 lines, in the health line's place).
func (m Model) extraHealthLines() int {
	if m.height < 40 {
		return 0
	}
	n := 0
	for _, c := range m.header {
		if c.Status == "warn" || c.Status == "fail" {
			n++
		}
	}
	return min(n, 3)
}

// View draws the screen: exactly height lines of at most width columns.
func (m Model) View() string {
	w := max(m.width, 20)
	lines := []string{m.titleLine(w)}
	lines = append(lines, m.healthLines(w)...)
	var body []string
	switch m.mode {
	case modeDetail:
		body = m.detailBody(w)
	case modeHelp:
		body = m.helpBody(w)
	default:
		body = m.tableBody(w)
	}
	status := m.statusLines()
	bodyHeight := m.bodyHeight()
	for len(body) < bodyHeight {
		body = append(body, "")
	}
	body = body[:bodyHeight]
	if m.mode == modeReason || m.mode == modeConfirm {
		box := m.confirmBox(w)
		if len(box) < len(body) {
			copy(body[len(body)-len(box):], box)
		}
	}
	lines = append(lines, body...)
	lines = append(lines, status...)
	lines = append(lines, m.keyLine(w))
	if len(lines) > m.height && m.height > 0 {
		lines = lines[:m.height]
	}
	return strings.Join(lines, "\n")
}

// pad cuts or pads plain text to exactly w columns.
func pad(text string, w int) string {
	text = output.Truncate(text, w)
	return text + strings.Repeat(" ", max(w-textWidth(text), 0))
}

func textWidth(s string) int { return output.Width(s) }

func (m Model) titleLine(w int) string {
	var b strings.Builder
	b.WriteString(" studioctl top ")
	for v := range numViews {
		name := fmt.Sprintf("%d %s", v+1, v)
		if v == m.view {
			name = "[" + name + "]"
		} else {
			name = " " + name + " "
		}
		b.WriteString(name)
	}
	left := b.String()
	var right string
	switch {
	case m.busLost:
		right = "BUS LOST: polling "
	case m.o.ReadOnly:
		right = "read-only "
	}
	if vs := m.views[m.view]; vs.loaded {
		right += vs.at.UTC().Format("15:04:05Z") + " "
	}
	gap := w - textWidth(left) - textWidth(right)
	if gap < 1 {
		return m.st.title.Render(pad(left+" "+right, w))
	}
	return m.st.title.Render(left + strings.Repeat(" ", gap) + right)
}

// healthLines are doctor's checks in one line, then the detail of the
// worst on the next (of up to three on a tall screen).
func (m Model) healthLines(w int) []string {
	if len(m.header) == 0 {
		return []string{pad(" checking...", w), ""}
	}
	var b strings.Builder
	var plain strings.Builder
	for i, c := range m.header {
		if i > 0 {
			b.WriteString("  ")
			plain.WriteString("  ")
		}
		status := c.Status
		if status == "fail" {
			status = "FAIL"
		}
		tok := c.Label + ":" + status
		if plain.Len()+len(tok) > w {
			break
		}
		plain.WriteString(tok)
		b.WriteString(c.Label + ":" + m.st.tone[checkTone(c.Status)].Render(status))
	}
	lines := []string{" " + b.String()}
	var bad []Check
	for _, c := range m.header {
		if c.Status == "fail" {
			bad = append(bad, c)
		}
	}
	for _, c := range m.header {
		if c.Status == "warn" {
			bad = append(bad, c)
		}
	}
	n := m.healthDetailLines()
	if len(bad) == 0 {
		lines = append(lines, pad(" no check reports a problem", w))
		for len(lines) < 1+n {
			lines = append(lines, "")
		}
		return lines
	}
	for i := 0; i < n; i++ {
		if i >= len(bad) {
			lines = append(lines, "")
			continue
		}
		c := bad[i]
		lines = append(lines, " "+m.st.tone[checkTone(c.Status)].Render(output.Truncate(c.Name+": "+c.Detail, w-1)))
	}
	return lines
}

func checkTone(status string) output.Tone {
	switch status {
	case "ok":
		return output.Good
	case "warn":
		return output.Warn
	case "fail":
		return output.Bad
	}
	return output.Dim
}

// visibleColumns are the columns shown and their widths: the first, then
// from hscroll on as many as fit, the last cut to what is left.
func (m Model) visibleColumns(w int) ([]int, []int) {
	vs := m.views[m.view]
	n := len(vs.table.Columns)
	if n == 0 {
		return nil, nil
	}
	room := w - len(cursorMark)
	var cols, widths []int
	add := func(i int) bool {
		cw := vs.widths[i]
		if i != n-1 {
			cw = min(cw, maxColumnWidth)
		}
		if len(cols) > 0 {
			room -= len(columnGap)
		}
		if room <= 0 {
			return false
		}
		if cw > room {
			cw = room
		}
		cols, widths = append(cols, i), append(widths, cw)
		room -= cw
		return room > 0
	}
	if !add(0) {
		return cols, widths
	}
	for i := 1 + vs.hscroll; i < n; i++ {
		if !add(i) {
			break
		}
	}
	return cols, widths
}

func (m Model) tableBody(w int) []string {
	vs := m.views[m.view]
	if !vs.loaded {
		return []string{" reading " + m.view.String() + "..."}
	}
	cols, widths := m.visibleColumns(w)
	var head strings.Builder
	head.WriteString(strings.Repeat(" ", len(cursorMark)))
	for k, i := range cols {
		if k > 0 {
			head.WriteString(columnGap)
		}
		name := vs.table.Columns[i]
		if i == vs.sortCol {
			name += map[bool]string{false: "^", true: "v"}[vs.desc]
		}
		head.WriteString(pad(name, widths[k]))
	}
	lines := []string{m.st.bold.Render(strings.TrimRight(head.String(), " "))}
	if len(vs.rows) == 0 {
		what := "no " + m.view.String()
		if vs.filter != "" {
			what += " match the filter " + fmt.Sprintf("%q", vs.filter) + " (esc clears it)"
		}
		return append(lines, "  "+what)
	}
	end := min(vs.offset+m.tableRows(), len(vs.rows))
	for r := vs.offset; r < end; r++ {
		row := vs.table.Rows[vs.rows[r]]
		selected := r == vs.cursor
		var b strings.Builder
		mark := strings.Repeat(" ", len(cursorMark))
		if selected {
			mark = cursorMark
		}
		b.WriteString(mark)
		for k, i := range cols {
			if k > 0 {
				b.WriteString(columnGap)
			}
			var c output.Cell
			if i < len(row) {
				c = row[i]
			}
			text := output.Safe(c.Text)
			if k == len(cols)-1 {
				text = output.Truncate(text, widths[k])
			} else {
				text = pad(text, widths[k])
			}
			if selected {
				b.WriteString(text)
			} else {
				b.WriteString(m.st.cell(c.Tone, text))
			}
		}
		line := b.String()
		if selected {
			line = m.st.selected.Render(pad(line, w))
		}
		lines = append(lines, line)
	}
	return lines
}

func (m Model) detailBody(w int) []string {
	hint := "  (esc back, j/k scroll)"
	selLine := -1
	if len(m.detailOcc) > 0 {
		hint = "  (esc back, j/k select an occurrence, enter jobs why)"
		selLine = m.detailOcc[m.detailSel].Line
	}
	lines := []string{m.st.bold.Render(pad(" "+m.detailTitle+hint, w))}
	rows := m.detailRows()
	end := min(m.detailTop+rows, len(m.detailLines))
	for i := m.detailTop; i < end; i++ {
		l := output.Safe(strings.ReplaceAll(m.detailLines[i], "\t", "  "))
		if i == selLine {
			lines = append(lines, m.st.selected.Render(pad(output.Truncate(">"+l, w), w)))
			continue
		}
		lines = append(lines, output.Truncate(" "+l, w))
	}
	return lines
}

// helpText is the help screen (docs/top.md says the same).
var helpText = []string{
	"views     1 replicas  2 jobs  3 locks  4 leases  5 events  tab/shift+tab next/previous",
	"move      up/down j/k  pgup/pgdn  g/G first/last  left/right more columns",
	"find      / filter (enter keeps it, esc clears)  s sort by the next column  S reverse",
	"look      enter drill down, esc back; in a job's, j/k enter: jobs why of one",
	"act       r release a lock (locks)       d drain a replica (replicas)",
	"          R release a lock by force, whatever its holder (--force)",
	"          t trigger a job (jobs)         p pause or resume a job (jobs)",
	"          h release a lease (leases)",
	"          each asks a reason (enter), shows the studioctl command, y confirms, esc cancels",
	"header    doctor's checks: crashed replicas, stale locks, unowned clusters,",
	"          failing, overdue and drifting jobs; the worst one's detail below",
	"live      redrawn within a second of a change (the bus); read every 10s without it",
	"quit      q or ctrl+c",
	"",
	"any key closes this help",
}

func (m Model) helpBody(w int) []string {
	lines := []string{m.st.bold.Render(pad(" help", w))}
	for _, l := range helpText {
		lines = append(lines, output.Truncate(" "+l, w))
	}
	if m.o.ReadOnly {
		lines = append(lines, " read-only: started with --read-only, every action is disabled")
	}
	return lines
}

func (m Model) confirmBox(w int) []string {
	a := m.pending
	inner := w - 4
	var lines []string
	lines = append(lines, " "+a.Question())
	if w := a.Warning(); w != "" {
		lines = append(lines, " "+w)
	}
	lines = append(lines, " $ "+a.CommandLine())
	if m.mode == modeReason {
		lines = append(lines, " reason: "+m.input+"_")
		lines = append(lines, " enter to continue (the reason is optional), esc to cancel")
	} else {
		lines = append(lines, " y to confirm, esc to cancel")
	}
	border := "+" + strings.Repeat("-", w-2) + "+"
	out := []string{border}
	for _, l := range lines {
		// A target comes from a row any role can write: its control
		// characters are shown escaped, never sent to the terminal.
		out = append(out, "|"+pad(output.Safe(l), inner+2)+"|")
	}
	return append(out, border)
}

// statusLines are the position, filter and sort, then the last result or
// error: one line, or two when the message does not fit on one.
func (m Model) statusLines() []string {
	w := max(m.width, 20)
	vs := m.views[m.view]
	var info string
	switch m.mode {
	case modeFilter:
		info = "/" + m.input + "_"
	default:
		if vs.loaded {
			info = fmt.Sprintf("%d/%d", min(vs.cursor+1, len(vs.rows)), len(vs.rows))
			if len(vs.rows) != len(vs.table.Rows) {
				info += fmt.Sprintf(" of %d", len(vs.table.Rows))
			}
		}
		if vs.filter != "" {
			info += " filter:" + vs.filter
		}
		if vs.sortCol >= 0 && vs.sortCol < len(vs.table.Columns) {
			info += " sort:" + vs.table.Columns[vs.sortCol] + map[bool]string{false: "^", true: "v"}[vs.desc]
		}
	}
	msg, bad := m.status, m.statusBad
	switch {
	case m.busLost:
		msg, bad = "bus lost: reading the database every 10s until it is back", true
	case m.readFailed != "":
		msg, bad = "read failed, retrying: "+m.readFailed, true
	}
	line := " " + info
	if msg != "" {
		line += " | " + msg
	}
	line = output.Safe(line)
	var lines []string
	if output.Width(line) <= w {
		lines = []string{line}
	} else {
		lines = []string{output.Truncate(" "+info, w), output.Truncate(" "+output.Safe(msg), w)}
		if ws := output.Wrap(output.Safe(msg), w, " ", " "); len(ws) > 1 && output.Width(" "+info+" | "+ws[0]) <= w {
			// The message's first words beside the position, the rest below.
			rest := strings.TrimSpace(strings.TrimPrefix(output.Safe(msg), strings.TrimSpace(ws[0])))
			lines = []string{" " + info + " | " + strings.TrimSpace(ws[0]), output.Truncate(" "+rest, w)}
		}
	}
	if bad {
		for i := range lines {
			lines[i] = m.st.bad.Render(lines[i])
		}
	}
	return lines
}

// keyLine names the keys that work here.
func (m Model) keyLine(w int) string {
	var keys string
	switch m.mode {
	case modeDetail:
		keys = "esc back  j/k scroll  q quit"
		if len(m.detailOcc) > 0 {
			keys = "esc back  j/k select  enter jobs why  pgup/pgdn scroll  q quit"
		}
	case modeFilter:
		keys = "type to filter  enter keep  esc clear"
	case modeReason:
		keys = "type the reason  enter continue  esc cancel"
	case modeConfirm:
		keys = "y confirm  esc cancel"
	default:
		act := map[View]string{Replicas: "d drain", Jobs: "t trigger  p pause/resume", Locks: "r release  R by force", Leases: "h release"}[m.view]
		if m.o.ReadOnly {
			act = "read-only"
		}
		keys = "? help  q quit  1-5 view  / filter  s sort  enter detail"
		if act != "" {
			keys += "  " + act
		}
	}
	return m.st.tone[output.Dim].Render(output.Truncate(" "+keys, w))
}
