package top

import (
	"context"
	"slices"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/studioctl/studioctl/internal/natsort"
)

// Messages the model takes besides Bubble Tea's keys and sizes.
type (
	// SnapshotMsg is a read of a view (Feed sends it), with the header
	// when it was read too.
	SnapshotMsg Snapshot
	// HeaderMsg is a read of the header alone.
	HeaderMsg []Check
	// ReadFailedMsg: a read failed; Err says why ("" when reads work again).
	ReadFailedMsg struct{ Err string }
	// BusMsg: the bus connection was lost (Live false) or is back.
	BusMsg struct{ Live bool }
	// DetailMsg is the drill-down of one row; Occurrences are those it
	// lists (a job's), Why says it tells jobs why of a selected one.
	DetailMsg struct {
		View        View
		Key         string
		Text        string
		Occurrences []Occurrence
		Why         *Occurrence
		Error       string
	}
	// DoneMsg is the result of an action.
	DoneMsg struct {
		Action Action
		Output string
		Error  string
	}
)

// mode is what the keys do.
type mode int

const (
	modeTable   mode = iota
	modeFilter       // typing a filter
	modeReason       // typing an action's reason
	modeConfirm      // y or esc
	modeDetail       // a row's drill-down
	modeHelp
)

// Options of New.
type Options struct {
	// Source is where the drill-down reads; Actor does the actions; Want
	// is told the view on screen, so the feed reads it (all may be nil in
	// tests that only draw).
	Source Source
	Actor  Actor
	Want   func(View)
	// ReadOnly disables every action.
	ReadOnly bool
	// Color draws states in colour (off with NO_COLOR or --no-color).
	Color bool
	// Now is the display clock.
	Now func() time.Time
	// Ctx bounds the reads and actions the model starts.
	Ctx context.Context
}

// viewState is what the model keeps per view.
type viewState struct {
	table   Table
	loaded  bool
	at      time.Time
	filter  string
	sortCol int // -1: the list command's order
	desc    bool
	cursor  int // index into rows
	offset  int // first row shown
	hscroll int // columns hidden after the first
	// rows are the indexes of table.Rows shown, filtered and sorted;
	// widths the columns' widths over them (computed in Update, so View
	// and scrolling stay cheap for 10,000 rows).
	rows   []int
	widths []int
}

// Model is the screen's state.
type Model struct {
	o      Options
	width  int
	height int
	view   View
	views  [numViews]viewState
	header []Check
	mode   mode
	// input is the text being typed (filter or reason).
	input string
	// pending is the action being confirmed.
	pending Action
	// status is the last result or error, shown above the key line.
	status     string
	statusBad  bool
	readFailed string
	busLost    bool
	// detail: the drill-down on screen, of row detailKey of detailView;
	// detailOcc the occurrences it lists (a job's), detailSel the one
	// selected for jobs why.
	detailView  View
	detailKey   string
	detailTitle string
	detailLines []string
	detailTop   int
	detailOcc   []Occurrence
	detailSel   int
	st          styles
}

// New returns the model, on the replicas view.
func New(o Options) Model {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Ctx == nil {
		o.Ctx = context.Background()
	}
	m := Model{o: o, width: 80, height: 24, st: newStyles(o.Color)}
	for i := range m.views {
		m.views[i].sortCol = -1
	}
	return m
}

// Init asks for nothing: the feed sends the first read.
func (m Model) Init() tea.Cmd { return nil }

// Update takes one message.
func (m Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.clampAll()
		return m, nil
	case SnapshotMsg:
		vs := &m.views[msg.View]
		key := m.selectedKeyOf(msg.View)
		vs.table, vs.loaded, vs.at = msg.Table, true, msg.At
		if msg.Header != nil {
			m.header = msg.Header
		}
		m.derive(msg.View)
		m.reselect(msg.View, key)
		return m, nil
	case HeaderMsg:
		m.header = msg
		return m, nil
	case ReadFailedMsg:
		m.readFailed = msg.Err
		return m, nil
	case BusMsg:
		m.busLost = !msg.Live
		return m, nil
	case DetailMsg:
		if m.mode != modeDetail || msg.View != m.detailView || msg.Key != m.detailKey {
			return m, nil
		}
		text := msg.Text
		if msg.Error != "" {
			text = "error: " + msg.Error
		}
		m.detailLines = strings.Split(strings.TrimRight(text, "\n"), "\n")
		m.detailTop = 0
		sel := 0
		if msg.Why != nil {
			// Keep the occurrence selected, and show its why (the last
			// section).
			for i, o := range msg.Occurrences {
				if o.At.Equal(msg.Why.At) && o.Scope == msg.Why.Scope {
					sel = i
				}
			}
			m.detailTop = max(len(m.detailLines)-m.detailRows(), 0)
		}
		m.detailOcc, m.detailSel = msg.Occurrences, sel
		return m, nil
	case DoneMsg:
		if msg.Error != "" {
			m.status, m.statusBad = oneLine(msg.Error), true
		} else {
			m.status, m.statusBad = oneLine(msg.Output), false
			if m.status == "" {
				m.status = msg.Action.CommandLine() + ": done"
			}
		}
		return m, m.want()
	case tea.KeyMsg:
		return m.key(msg)
	}
	return m, nil
}

// want tells the feed which view is on screen (it reads it at once).
func (m Model) want() tea.Cmd {
	if m.o.Want == nil {
		return nil
	}
	v, want := m.view, m.o.Want
	return func() tea.Msg { want(v); return nil }
}

func (m Model) key(k tea.KeyMsg) (tea.Model, tea.Cmd) {
	if k.Type == tea.KeyRunes && len(k.Runes) > 1 && !k.Paste {
		// Keys typed faster than the screen reads them (or sent by tmux
		// in one write) arrive as one message: each is a key of its own,
		// and one may change what the next does (r, then the reason).
		var cmds []tea.Cmd
		var next tea.Model = m
		for _, r := range k.Runes {
			var cmd tea.Cmd
			next, cmd = next.(Model).key(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
			cmds = append(cmds, cmd)
		}
		return next, tea.Batch(cmds...)
	}
	s := k.String()
	if s == "ctrl+c" {
		return m, tea.Quit
	}
	switch m.mode {
	case modeFilter:
		return m.typing(k, func(m *Model) { m.views[m.view].filter = m.input; m.derive(m.view); m.mode = modeTable },
			func(m *Model) { m.views[m.view].filter = ""; m.derive(m.view); m.mode = modeTable }, true)
	case modeReason:
		return m.typing(k, func(m *Model) { m.pending.Reason = m.input; m.mode = modeConfirm },
			func(m *Model) { m.mode, m.status, m.statusBad = modeTable, "cancelled: nothing changed", false }, false)
	case modeConfirm:
		switch s {
		case "y", "Y":
			m.mode = modeTable
			m.status, m.statusBad = m.pending.CommandLine()+": running...", false
			return m, m.do(m.pending)
		case "esc", "n", "N", "q":
			m.mode, m.status, m.statusBad = modeTable, "cancelled: nothing changed", false
		}
		return m, nil
	case modeHelp:
		if s == "q" {
			return m, tea.Quit
		}
		m.mode = modeTable
		return m, nil
	case modeDetail:
		occ := len(m.detailOcc)
		switch s {
		case "esc", "backspace", "left", "h":
			m.mode = modeTable
		case "enter":
			if occ == 0 {
				m.mode = modeTable
				break
			}
			why := m.detailOcc[m.detailSel]
			m.status, m.statusBad = "$ "+why.CommandLine(), false
			return m, m.readDetail(&why)
		case "q":
			return m, tea.Quit
		case "down", "j":
			if occ > 0 {
				m.selectOccurrence(m.detailSel + 1)
				break
			}
			m.detailTop = min(m.detailTop+1, max(len(m.detailLines)-m.detailRows(), 0))
		case "up", "k":
			if occ > 0 {
				m.selectOccurrence(m.detailSel - 1)
				break
			}
			m.detailTop = max(m.detailTop-1, 0)
		case "pgdown", " ":
			m.detailTop = min(m.detailTop+m.detailRows(), max(len(m.detailLines)-m.detailRows(), 0))
		case "pgup":
			m.detailTop = max(m.detailTop-m.detailRows(), 0)
		}
		return m, nil
	}
	vs := &m.views[m.view]
	switch s {
	case "q":
		return m, tea.Quit
	case "?":
		m.mode = modeHelp
	case "1", "2", "3", "4", "5":
		return m.switchTo(View(s[0] - '1'))
	case "tab":
		return m.switchTo((m.view + 1) % numViews)
	case "shift+tab":
		return m.switchTo((m.view + numViews - 1) % numViews)
	case "down", "j":
		m.move(1)
	case "up", "k":
		m.move(-1)
	case "pgdown", "ctrl+f", " ":
		m.move(m.tableRows())
	case "pgup", "ctrl+b":
		m.move(-m.tableRows())
	case "home", "g":
		m.move(-len(vs.rows))
	case "end", "G":
		m.move(len(vs.rows))
	case "right", "l":
		if vs.hscroll < len(vs.table.Columns)-2 {
			vs.hscroll++
		}
	case "left":
		if vs.hscroll > 0 {
			vs.hscroll--
		}
	case "/":
		m.mode, m.input = modeFilter, vs.filter
	case "esc":
		if vs.filter != "" {
			vs.filter = ""
			m.derive(m.view)
		}
	case "s":
		// The next column, after the last the list's own order again.
		vs.sortCol++
		if vs.sortCol >= len(vs.table.Columns) {
			vs.sortCol = -1
		}
		vs.desc = false
		m.derive(m.view)
	case "S":
		vs.desc = !vs.desc
		m.derive(m.view)
	case "enter":
		key := m.selectedKey()
		if key == "" || m.o.Source == nil {
			return m, nil
		}
		m.mode = modeDetail
		m.detailView, m.detailKey = m.view, key
		m.detailTitle = m.view.String() + " " + key
		m.detailLines, m.detailTop = []string{"reading..."}, 0
		m.detailOcc, m.detailSel = nil, 0
		return m, m.readDetail(nil)
	case "r", "R", "d", "t", "p", "h":
		return m.startAction(s)
	}
	return m, nil
}

// readDetail reads the drill-down on screen, with jobs why of why (nil:
// of the last occurrence that fell due).
func (m Model) readDetail(why *Occurrence) tea.Cmd {
	src, ctx, v, key := m.o.Source, m.o.Ctx, m.detailView, m.detailKey
	return func() tea.Msg {
		d, err := src.Detail(ctx, v, key, why)
		msg := DetailMsg{View: v, Key: key, Text: d.Text, Occurrences: d.Occurrences, Why: why}
		if err != nil {
			msg.Error = err.Error()
		}
		return msg
	}
}

// selectOccurrence selects occurrence i of a job's drill-down (kept
// inside the list) and scrolls to show it.
func (m *Model) selectOccurrence(i int) {
	m.detailSel = max(min(i, len(m.detailOcc)-1), 0)
	line, rows := m.detailOcc[m.detailSel].Line, m.detailRows()
	if line < m.detailTop {
		m.detailTop = line
	}
	if line >= m.detailTop+rows {
		m.detailTop = line - rows + 1
	}
}

// typing edits m.input; enter calls done, esc cancel.
func (m Model) typing(k tea.KeyMsg, done, cancel func(*Model), live bool) (tea.Model, tea.Cmd) {
	switch k.Type {
	case tea.KeyEnter:
		done(&m)
	case tea.KeyEsc:
		cancel(&m)
	case tea.KeyBackspace:
		if r := []rune(m.input); len(r) > 0 {
			m.input = string(r[:len(r)-1])
		}
	case tea.KeySpace:
		m.input += " "
	case tea.KeyRunes:
		m.input += string(k.Runes)
	}
	if live && m.mode == modeFilter {
		m.views[m.view].filter = m.input
		m.derive(m.view)
	}
	return m, nil
}

func (m Model) switchTo(v View) (tea.Model, tea.Cmd) {
	m.view = v
	return m, m.want()
}

// actionFor is the action a key starts on a view, or false.
func (m Model) actionFor(key string) (Verb, bool) {
	switch {
	case (key == "r" || key == "R") && m.view == Locks:
		return ReleaseLock, true
	case key == "d" && m.view == Replicas:
		return DrainReplica, true
	case key == "t" && m.view == Jobs:
		return TriggerJob, true
	case key == "p" && m.view == Jobs:
		if m.selectedPaused() {
			return ResumeJob, true
		}
		return PauseJob, true
	case key == "h" && m.view == Leases:
		return ReleaseLease, true
	}
	return 0, false
}

func (m Model) startAction(key string) (tea.Model, tea.Cmd) {
	verb, ok := m.actionFor(key)
	if !ok {
		return m, nil
	}
	if m.o.ReadOnly {
		m.status, m.statusBad = "read-only: actions are disabled (started with --read-only)", true
		return m, nil
	}
	target := m.selectedKey()
	if target == "" {
		return m, nil
	}
	m.pending = Action{Verb: verb, Target: target}
	if key == "R" {
		// By force: the row's holder and its liveness for the question.
		m.pending.Force = true
		m.pending.Holder, m.pending.HolderState = m.selectedCell("LOCKED BY"), m.selectedCell("HOLDER")
	}
	m.mode, m.input = modeReason, ""
	return m, nil
}

func (m Model) do(a Action) tea.Cmd {
	if m.o.Actor == nil {
		return nil
	}
	actor, ctx := m.o.Actor, m.o.Ctx
	return func() tea.Msg {
		out, err := actor.Do(ctx, a)
		if err != nil {
			return DoneMsg{Action: a, Output: out, Error: err.Error()}
		}
		return DoneMsg{Action: a, Output: out}
	}
}

// selectedPaused: the selected job's HEALTH says paused (or its PAUSED
// column is set).
func (m Model) selectedPaused() bool {
	vs := m.views[m.view]
	if len(vs.rows) == 0 {
		return false
	}
	row := vs.table.Rows[vs.rows[vs.cursor]]
	for i, c := range vs.table.Columns {
		if i >= len(row) {
			break
		}
		if (c == "HEALTH" && strings.HasPrefix(row[i].Text, "paused")) || (c == "PAUSED" && row[i].Text != "") {
			return true
		}
	}
	return false
}

// selectedCell is the selected row's cell of column col, or "".
func (m Model) selectedCell(col string) string {
	vs := m.views[m.view]
	if len(vs.rows) == 0 || vs.cursor >= len(vs.rows) {
		return ""
	}
	row := vs.table.Rows[vs.rows[vs.cursor]]
	for i, c := range vs.table.Columns {
		if c == col && i < len(row) {
			return row[i].Text
		}
	}
	return ""
}

// selectedKey is the key (first cell) of the selected row, or "".
func (m Model) selectedKey() string { return m.selectedKeyOf(m.view) }

func (m Model) selectedKeyOf(v View) string {
	vs := m.views[v]
	if len(vs.rows) == 0 || vs.cursor >= len(vs.rows) {
		return ""
	}
	row := vs.table.Rows[vs.rows[vs.cursor]]
	if len(row) == 0 {
		return ""
	}
	return row[0].Text
}

// reselect keeps the cursor on the row with key after a new read.
func (m *Model) reselect(v View, key string) {
	vs := &m.views[v]
	if key != "" {
		for i, r := range vs.rows {
			if row := vs.table.Rows[r]; len(row) > 0 && row[0].Text == key {
				vs.cursor = i
				break
			}
		}
	}
	m.clamp(v)
}

func (m *Model) move(n int) {
	vs := &m.views[m.view]
	vs.cursor += n
	m.clamp(m.view)
}

func (m *Model) clampAll() {
	for v := range numViews {
		m.clamp(v)
	}
}

// clamp keeps the cursor on a row and in the rows shown.
func (m *Model) clamp(v View) {
	vs := &m.views[v]
	vs.cursor = max(min(vs.cursor, len(vs.rows)-1), 0)
	h := m.tableRows()
	if vs.cursor < vs.offset {
		vs.offset = vs.cursor
	}
	if vs.cursor >= vs.offset+h {
		vs.offset = vs.cursor - h + 1
	}
	vs.offset = max(min(vs.offset, len(vs.rows)-h), 0)
}

// derive filters and sorts a view's rows and measures its columns.
func (m *Model) derive(v View) {
	vs := &m.views[v]
	t := vs.table
	if vs.sortCol >= len(t.Columns) {
		vs.sortCol = -1
	}
	f := strings.ToLower(vs.filter)
	rows := make([]int, 0, len(t.Rows))
	for i, r := range t.Rows {
		if f == "" || rowMatches(r, f) {
			rows = append(rows, i)
		}
	}
	if c := vs.sortCol; c >= 0 {
		slices.SortStableFunc(rows, func(a, b int) int {
			n := natsort.Compare(cellText(t.Rows[a], c), cellText(t.Rows[b], c))
			if vs.desc {
				return -n
			}
			return n
		})
	}
	widths := make([]int, len(t.Columns))
	for i, c := range t.Columns {
		widths[i] = textWidth(c) + 1 // room for the sort mark
	}
	for _, r := range rows {
		for i := range widths {
			widths[i] = max(widths[i], textWidth(cellText(t.Rows[r], i)))
		}
	}
	vs.rows, vs.widths = rows, widths
	m.clamp(v)
}

func rowMatches(r []outputCell, f string) bool {
	for _, c := range r {
		if strings.Contains(strings.ToLower(c.Text), f) {
			return true
		}
	}
	return false
}

func cellText(r []outputCell, i int) string {
	if i < len(r) {
		return r[i].Text
	}
	return ""
}

// oneLine joins the lines of s.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
