package top

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/studioctl/studioctl/internal/output"
)

var update = flag.Bool("update", false, "rewrite the golden frames in testdata")

// at is the fixed display time of the test data.
var at = time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)

func cell(text string, tone output.Tone) output.Cell { return output.Cell{Text: text, Tone: tone} }

func plain(texts ...string) []output.Cell {
	r := make([]output.Cell, len(texts))
	for i, t := range texts {
		r[i] = output.Cell{Text: t}
	}
	return r
}

var header = []Check{
	{Name: "crashed_replicas", Label: "crashed", Status: "fail", Detail: "1 crashed replica in the last 24h: web-3 on h3 (pid 33, ready): last heartbeat 2m ago, no stop recorded"},
	{Name: "stale_locks", Label: "stale", Status: "fail", Detail: "1 lock held by a gone replica: nightly-report held by gone replica web-3 until 2026-12-06T03:10:00Z"},
	{Name: "leases", Label: "unowned", Status: "ok"},
	{Name: "failing_jobs", Label: "failing", Status: "warn", Detail: "1 job failing: broken-import (6 failures, last error: command \"sh\": exit status 3)"},
	{Name: "overdue_jobs", Label: "overdue", Status: "ok"},
	{Name: "config_drift", Label: "drift", Status: "ok"},
}

func replicasTable() Table {
	return Table{
		Columns: []string{"ID", "HOST", "VERSION", "STATE", "HEARTBEAT", "UPTIME", "RUNS", "LEASES"},
		Rows: [][]output.Cell{
			{cell("web-1", 0), cell("h1", 0), cell("dev", 0), cell("ready", output.Good), cell("1s ago", 0), cell("5m2s", 0), cell("1", 0), cell("4", 0)},
			{cell("web-2", 0), cell("h2", 0), cell("dev", 0), cell("draining", output.Warn), cell("2s ago", 0), cell("5m1s", 0), cell("0", 0), cell("0", 0)},
			{cell("web-3", 0), cell("h3", 0), cell("dev", 0), cell("crashed", output.Bad), cell("2m ago", 0), cell("", 0), cell("0", 0), cell("0", 0)},
		},
	}
}

func locksTable() Table {
	return Table{
		Columns: []string{"NAME", "STATE", "LOCKED BY", "HOLDER", "LOCKED AT", "LOCK UNTIL", "REMAINING"},
		Rows: [][]output.Cell{
			plain("java-job", "held", "java-node-1", "unknown", "1m ago", "in 9m", "9m0s"),
			plain("nightly-report", "stale", "web-3", "gone", "2m ago", "in 10m", "10m0s"),
			plain("report", "free", "web-1", "live", "8s ago", "1s ago", ""),
		},
	}
}

func jobsTable(n int) Table {
	t := Table{Columns: []string{"ID", "SCOPE", "SCHEDULE", "HEALTH", "LAST RUN", "OUTCOME", "WHERE", "NEXT FIRE", "RUNS", "FAILURES", "LAST DUE", "SKIP 24H", "MISS 24H", "PAUSED"}}
	for i := range n {
		id := "job-" + strings.Repeat("0", 5-len(itoa(i))) + itoa(i)
		health := cell("ok", output.Good)
		paused := ""
		if i%7 == 3 {
			health, paused = cell("paused", output.Dim), "by ops"
		}
		t.Rows = append(t.Rows, append([]output.Cell{cell(id, 0), cell("installation", 0), cell("every 10s", 0), health},
			plain("3s ago", "succeeded", "web-"+itoa(i%3+1), "in 7s", itoa(i*3), "0", "ran", "0", "0", paused)...))
	}
	return t
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// send runs msgs through Update in order, running no commands.
func send(m Model, msgs ...tea.Msg) Model {
	for _, msg := range msgs {
		next, _ := m.Update(msg)
		m = next.(Model)
	}
	return m
}

func keys(s string) []tea.Msg {
	var out []tea.Msg
	for _, r := range s {
		out = append(out, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
	}
	return out
}

func key(t tea.KeyType) tea.Msg { return tea.KeyMsg{Type: t} }

func loaded(o Options, w, h int) Model {
	m := New(o)
	return send(m, tea.WindowSizeMsg{Width: w, Height: h},
		SnapshotMsg{View: Locks, Table: locksTable(), At: at},
		SnapshotMsg{View: Jobs, Table: jobsTable(40), At: at},
		SnapshotMsg{View: Replicas, Table: replicasTable(), Header: header, At: at})
}

// golden compares got with testdata/name (rewritten with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs (-update rewrites it)\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// frame checks the screen's shape: height lines of at most width columns.
func frame(t *testing.T, m Model, w, h int) string {
	t.Helper()
	v := m.View()
	lines := strings.Split(v, "\n")
	if len(lines) != h {
		t.Errorf("frame has %d lines, want %d", len(lines), h)
	}
	for i, l := range lines {
		if output.Width(l) > w {
			t.Errorf("line %d is %d columns wide, more than %d: %q", i, output.Width(l), w, l)
		}
	}
	return v + "\n"
}

func TestFramesAtBothSizes(t *testing.T) {
	sizes := []struct{ w, h int }{{80, 24}, {160, 48}}
	screens := []struct {
		name string
		msgs []tea.Msg
	}{
		{"replicas", nil},
		{"jobs", keys("2jj")},
		{"jobs-sorted-filtered", append(append(keys("2sss/job-0001"), key(tea.KeyEnter)), keys("S")...)},
		{"locks-confirm", append(append(keys("3jr"), keys("replica crashed")...), key(tea.KeyEnter))},
		{"locks-reason", keys("3jrreplica cr")},
		{"help", keys("?")},
		{"bus-lost", []tea.Msg{BusMsg{Live: false}}},
		{"done", append(keys("3j"), DoneMsg{Action: Action{Verb: ReleaseLock, Target: "nightly-report"}, Output: "released lock \"nightly-report\": was stale by web-3 (gone) until 2026-12-06T03:10:00Z"})},
		{"refused", append(keys("3"), DoneMsg{Action: Action{Verb: ReleaseLock, Target: "java-job", Reason: "hung"}, Error: "refused: lock \"java-job\" is held by an unknown holder java-node-1; use --force"})},
	}
	for _, sz := range sizes {
		for _, s := range screens {
			name := s.name + "-" + itoa(sz.w) + "x" + itoa(sz.h) + ".txt"
			t.Run(name, func(t *testing.T) {
				m := send(loaded(Options{Now: func() time.Time { return at }}, sz.w, sz.h), s.msgs...)
				golden(t, name, frame(t, m, sz.w, sz.h))
			})
		}
	}
}

// fakeActor records the actions it is asked to do.
type fakeActor struct{ done []Action }

func (f *fakeActor) Do(_ context.Context, a Action) (string, error) {
	f.done = append(f.done, a)
	return "released lock \"" + a.Target + "\"", nil
}

// run sends msgs and runs the commands Update returns (one level deep:
// what the model asks of its Actor and Source), feeding their messages back.
func run(m Model, msgs ...tea.Msg) (Model, []tea.Msg) {
	var got []tea.Msg
	for _, msg := range msgs {
		next, cmd := m.Update(msg)
		m = next.(Model)
		for _, out := range runCmd(cmd) {
			got = append(got, out)
			next, _ = m.Update(out)
			m = next.(Model)
		}
	}
	return m, got
}

func runCmd(cmd tea.Cmd) []tea.Msg {
	if cmd == nil {
		return nil
	}
	msg := cmd()
	if b, ok := msg.(tea.BatchMsg); ok {
		var out []tea.Msg
		for _, c := range b {
			out = append(out, runCmd(c)...)
		}
		return out
	}
	if msg == nil {
		return nil
	}
	return []tea.Msg{msg}
}

func TestAnActionAsksAReasonThenYesAndRunsTheVerbOnce(t *testing.T) {
	a := &fakeActor{}
	var wanted []View
	m := loaded(Options{Actor: a, Want: func(v View) { wanted = append(wanted, v) }}, 80, 24)
	m, _ = run(m, keys("3jr")...)
	if len(a.done) != 0 {
		t.Fatalf("the action ran before it was confirmed: %v", a.done)
	}
	m, _ = run(m, append(keys("gone host"), key(tea.KeyEnter))...)
	if !strings.Contains(m.View(), "$ studioctl locks release nightly-report --reason 'gone host' --yes") {
		t.Errorf("the confirmation does not show the command line:\n%s", m.View())
	}
	m, _ = run(m, keys("y")...)
	want := Action{Verb: ReleaseLock, Target: "nightly-report", Reason: "gone host"}
	if len(a.done) != 1 || a.done[0] != want {
		t.Fatalf("actions done: %v, want exactly %v", a.done, want)
	}
	if !strings.Contains(m.View(), `released lock "nightly-report"`) {
		t.Errorf("the result is not shown:\n%s", m.View())
	}
	if len(wanted) == 0 || wanted[len(wanted)-1] != Locks {
		t.Errorf("the view was not read again after the action: %v", wanted)
	}
}

func TestEscCancelsAnActionAtEitherStep(t *testing.T) {
	for _, tc := range []struct {
		name string
		msgs []tea.Msg
	}{
		{"at the reason", append(keys("3r"), key(tea.KeyEsc))},
		{"at the question", append(keys("3r"), key(tea.KeyEnter), key(tea.KeyEsc))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &fakeActor{}
			m, _ := run(loaded(Options{Actor: a}, 80, 24), tc.msgs...)
			m, _ = run(m, keys("y")...) // y after esc is no confirmation
			if len(a.done) != 0 {
				t.Errorf("a cancelled action ran: %v", a.done)
			}
			if !strings.Contains(m.View(), "cancelled: nothing changed") {
				t.Errorf("the cancel is not said:\n%s", m.View())
			}
		})
	}
}

func TestReadOnlyDisablesEveryAction(t *testing.T) {
	a := &fakeActor{}
	m := loaded(Options{Actor: a, ReadOnly: true}, 80, 24)
	for _, k := range []string{"1d", "2t", "2p", "3r", "3R", "4h"} {
		m, _ = run(m, append(keys(k), keys("why")...)...)
		m, _ = run(m, key(tea.KeyEnter))
		m, _ = run(m, keys("y")...)
		m, _ = run(m, key(tea.KeyEsc))
	}
	if len(a.done) != 0 {
		t.Fatalf("read-only ran actions: %v", a.done)
	}
	m, _ = run(m, keys("3r")...)
	if !strings.Contains(m.View(), "read-only: actions are disabled") {
		t.Errorf("read-only is not said:\n%s", m.View())
	}
}

func TestPOnAPausedJobResumesIt(t *testing.T) {
	a := &fakeActor{}
	// job-00003 is paused (i%7 == 3), job-00001 is not.
	m, _ := run(loaded(Options{Actor: a}, 80, 24), keys("2jjjp")...)
	m, _ = run(m, key(tea.KeyEnter))
	m, _ = run(m, keys("y")...)
	m, _ = run(m, keys("kkp")...)
	m, _ = run(m, key(tea.KeyEnter))
	_, _ = run(m, keys("y")...)
	want := []Action{{Verb: ResumeJob, Target: "job-00003"}, {Verb: PauseJob, Target: "job-00001"}}
	if len(a.done) != 2 || a.done[0] != want[0] || a.done[1] != want[1] {
		t.Errorf("actions %v, want %v", a.done, want)
	}
}

func TestKeysTypedTogetherActOneByOne(t *testing.T) {
	a := &fakeActor{}
	m, _ := run(loaded(Options{Actor: a}, 80, 24), tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("3jrwhy")})
	m, _ = run(m, key(tea.KeyEnter))
	_, _ = run(m, keys("y")...)
	if len(a.done) != 1 || a.done[0] != (Action{Verb: ReleaseLock, Target: "nightly-report", Reason: "why"}) {
		t.Errorf("actions %v", a.done)
	}
}

func TestQAndCtrlCQuit(t *testing.T) {
	for _, k := range []tea.Msg{keys("q")[0], key(tea.KeyCtrlC)} {
		_, cmd := loaded(Options{}, 80, 24).Update(k)
		if cmd == nil {
			t.Fatalf("%v: no command", k)
		}
		if _, ok := cmd().(tea.QuitMsg); !ok {
			t.Errorf("%v does not quit", k)
		}
	}
	// Ctrl-C quits while typing a reason, too.
	m := send(loaded(Options{Actor: &fakeActor{}}, 80, 24), keys("3r")...)
	if _, cmd := m.Update(key(tea.KeyCtrlC)); cmd == nil {
		t.Error("ctrl+c does not quit while typing a reason")
	} else if _, ok := cmd().(tea.QuitMsg); !ok {
		t.Error("ctrl+c does not quit while typing a reason")
	}
}

func TestColourFollowsTheOption(t *testing.T) {
	mono := loaded(Options{}, 80, 24).View()
	if strings.Contains(mono, "\x1b[") {
		t.Errorf("colour off (NO_COLOR) draws escape codes: %q", mono)
	}
	color := loaded(Options{Color: true}, 80, 24).View()
	if !strings.Contains(color, "\x1b[") {
		t.Error("colour on draws no escape codes")
	}
}

func TestResizeKeepsTheFrameAndTheSelection(t *testing.T) {
	m := send(loaded(Options{}, 80, 24), keys("2")...)
	m = send(m, key(tea.KeyEnd))
	for _, sz := range []tea.WindowSizeMsg{{Width: 160, Height: 48}, {Width: 40, Height: 10}, {Width: 80, Height: 24}} {
		m = send(m, sz)
		frame(t, m, sz.Width, sz.Height)
		if got := m.selectedKey(); got != "job-00039" {
			t.Errorf("after a resize to %dx%d the selection is %q, want job-00039", sz.Width, sz.Height, got)
		}
		if !strings.Contains(m.View(), "> job-00039") {
			t.Errorf("after a resize to %dx%d the selected row is not on screen", sz.Width, sz.Height)
		}
	}
}

func TestANewReadKeepsTheSelectedRow(t *testing.T) {
	m := send(loaded(Options{}, 80, 24), keys("3jj")...) // report
	tb := locksTable()
	tb.Rows = append([][]output.Cell{plain("aaa-first", "free", "", "", "", "", "")}, tb.Rows...)
	m = send(m, SnapshotMsg{View: Locks, Table: tb, At: at})
	if got := m.selectedKey(); got != "report" {
		t.Errorf("selection after a read that added a row above: %q, want report", got)
	}
}

// TestTenThousandJobsScroll: 10,000 rows draw and scroll; the time of one
// key and frame is logged (docs/benchmarks.md), never asserted.
func TestTenThousandJobsScroll(t *testing.T) {
	m := send(New(Options{}), tea.WindowSizeMsg{Width: 160, Height: 48})
	start := time.Now()
	m = send(m, keys("2")[0], SnapshotMsg{View: Jobs, Table: jobsTable(10000), Header: header, At: at})
	t.Logf("a read of 10,000 jobs taken in %s", time.Since(start))
	start = time.Now()
	const n = 100
	for range n {
		m = send(m, key(tea.KeyPgDown))
		_ = m.View()
	}
	t.Logf("page down and draw: %s each", time.Since(start)/n)
	m = send(m, keys("G")...)
	if got := m.selectedKey(); got != "job-09999" {
		t.Errorf("after G the selection is %q, want the last, job-09999", got)
	}
	m = send(m, append(keys("/job-0999"), key(tea.KeyEnter))...)
	if got := len(m.views[Jobs].rows); got != 10 {
		t.Errorf("filter job-0999 keeps %d rows, want 10", got)
	}
}

// fakeSource returns a table of one row, tells each read on reads, and
// gives the marks set with setMarks.
type fakeSource struct {
	reads chan read
	mu    sync.Mutex
	marks Marks
	// detail is what Detail returns (nil: an error).
	detail func(v View, key string, why *Occurrence) (Detail, error)
}

// read is one Load (header false) or Header (header true) of a fakeSource.
type read struct {
	view   View
	header bool
}

func (f *fakeSource) setMarks(m Marks) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.marks = m
}

func (f *fakeSource) Mark(context.Context, View) (Marks, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.marks, nil
}

func (f *fakeSource) Load(_ context.Context, v View) (Snapshot, error) {
	f.reads <- read{v, false}
	return Snapshot{View: v, Table: Table{Columns: []string{"ID"}, Rows: [][]output.Cell{plain("x")}}}, nil
}

func (f *fakeSource) Header(context.Context) ([]Check, error) {
	f.reads <- read{-1, true}
	return []Check{{Name: "stale_locks", Label: "stale", Status: "ok"}}, nil
}

func (f *fakeSource) Detail(_ context.Context, v View, key string, why *Occurrence) (Detail, error) {
	if f.detail == nil {
		return Detail{}, errors.New("no detail")
	}
	return f.detail(v, key, why)
}

// BenchmarkReadAndFrame10000Jobs is the redraw after a read of 10,000
// jobs: Update with the snapshot (filter, sort, measure) and View at
// 160x48 (docs/benchmarks.md, "studioctl top").
func BenchmarkReadAndFrame10000Jobs(b *testing.B) {
	tb := jobsTable(10000)
	m := send(New(Options{Color: true}), tea.WindowSizeMsg{Width: 160, Height: 48}, keys("2")[0])
	b.ResetTimer()
	for b.Loop() {
		next, _ := m.Update(SnapshotMsg{View: Jobs, Table: tb, Header: header, At: at})
		_ = next.(Model).View()
	}
}

// BenchmarkScrollFrame10000Jobs is one key (page down) and its frame.
func BenchmarkScrollFrame10000Jobs(b *testing.B) {
	m := send(New(Options{Color: true}), tea.WindowSizeMsg{Width: 160, Height: 48}, keys("2")[0],
		SnapshotMsg{View: Jobs, Table: jobsTable(10000), Header: header, At: at})
	b.ResetTimer()
	for b.Loop() {
		next, _ := m.Update(key(tea.KeyPgDown))
		m = next.(Model)
		if m.views[Jobs].cursor >= 9000 {
			m.views[Jobs].cursor, m.views[Jobs].offset = 0, 0
		}
		_ = m.View()
	}
}

// A lock's name comes from a row any role can write (a Java node's, or
// plain SQL): its control characters are shown escaped in the
// confirmation too, never sent to the terminal. The confirmation drew
// the command line raw.
func TestTheConfirmationShowsAHostileNameEscaped(t *testing.T) {
	hostile := "evil\x1b]0;pwned\x07\x1b[2J\u202e"
	m := New(Options{Actor: &fakeActor{}})
	m = send(m, tea.WindowSizeMsg{Width: 80, Height: 24},
		SnapshotMsg{View: Locks, Table: Table{Columns: []string{"NAME", "STATE"}, Rows: [][]output.Cell{plain(hostile, "stale")}}, At: at})
	m, _ = run(m, keys("3r")...)
	v := m.View()
	for _, bad := range []string{"\x1b]0;", "\x07", "\x1b[2J", "\u202e"} {
		if strings.Contains(v, bad) {
			t.Errorf("the frame sends %q to the terminal:\n%q", bad, v)
		}
	}
	if !strings.Contains(v, `evil\x1b]0;pwned`) {
		t.Errorf("the confirmation does not show the name escaped:\n%s", v)
	}
}

// jobDetail is a job's drill-down as the source gives it: three
// occurrences listed, and jobs why of the one asked (the last due by
// default).
func jobDetail(asked *[]*Occurrence) func(View, string, *Occurrence) (Detail, error) {
	return func(v View, key string, why *Occurrence) (Detail, error) {
		*asked = append(*asked, why)
		occ := []Occurrence{
			{Job: key, At: at.Add(-time.Minute), Scope: "", Line: 6},
			{Job: key, At: at.Add(-2 * time.Minute), Scope: "", Line: 7},
			{Job: key, At: at.Add(-3 * time.Minute), Scope: "", Line: 8},
		}
		told := "the last due time"
		if why != nil {
			told = why.At.Format("15:04:05Z")
		}
		text := strings.Join([]string{
			"job " + key,
			"ID         SCOPE         HEALTH  OUTCOME",
			key + "  installation  failing  failed",
			"",
			"occurrences, newest first",
			"NOMINAL               OUTCOME  REASON",
			"2026-12-06T02:59:00Z  ran",
			"2026-12-06T02:58:00Z  skipped  paused",
			"2026-12-06T02:57:00Z  missed   down",
			"",
			"why (" + told + ")",
			"The occurrence at " + told + " of " + key + " was told.",
		}, "\n")
		return Detail{Text: text, Occurrences: occ}, nil
	}
}

// In a job's drill-down, j/k select any occurrence it lists and enter
// tells jobs why of that one, through the source's Detail (the verb's run
// function with --at and --scope), showing the equivalent command; the
// drill-down only told of the newest.
func TestAJobsDrillDownTellsJobsWhyOfTheSelectedOccurrence(t *testing.T) {
	var asked []*Occurrence
	src := &fakeSource{reads: make(chan read, 8), detail: jobDetail(&asked)}
	for _, sz := range []struct{ w, h int }{{80, 24}, {160, 48}} {
		asked = nil
		m := loaded(Options{Source: src, Now: func() time.Time { return at }}, sz.w, sz.h)
		m, _ = run(m, append(keys("2j"), key(tea.KeyEnter))...)
		if len(asked) != 1 || asked[0] != nil {
			t.Fatalf("the drill-down asked %v, want one read with the verb's default", asked)
		}
		if m.mode != modeDetail || len(m.detailOcc) != 3 || m.detailSel != 0 {
			t.Fatalf("mode %v, %d occurrences, selected %d; want the drill-down, 3, the first", m.mode, len(m.detailOcc), m.detailSel)
		}
		m, _ = run(m, keys("jjjk")...) // the third, then back to the second (kept inside the list)
		if m.detailSel != 1 {
			t.Errorf("after jjjk occurrence %d is selected, want 1", m.detailSel)
		}
		m, _ = run(m, key(tea.KeyEnter))
		if len(asked) != 2 || asked[1] == nil || !asked[1].At.Equal(at.Add(-2*time.Minute)) || asked[1].Job != "job-00001" {
			t.Fatalf("enter asked %+v, want jobs why of job-00001's occurrence at 02:58", asked)
		}
		want := "$ studioctl jobs why job-00001 --at 2026-12-06T02:58:00Z --scope ''"
		if m.status != want {
			t.Errorf("status %q, want the equivalent command %q", m.status, want)
		}
		v := m.View()
		if !strings.Contains(v, "The occurrence at 02:58:00Z of job-00001 was told.") {
			t.Errorf("the frame does not show jobs why of the selected occurrence:\n%s", v)
		}
		if m.detailSel != 1 || m.mode != modeDetail {
			t.Errorf("after jobs why: mode %v, selected %d; want the drill-down, 1", m.mode, m.detailSel)
		}
		golden(t, "jobs-why-"+itoa(sz.w)+"x"+itoa(sz.h)+".txt", frame(t, m, sz.w, sz.h))
		m, _ = run(m, key(tea.KeyEsc))
		if m.mode != modeTable || m.view != Jobs {
			t.Errorf("esc left mode %v on view %v, want the jobs table", m.mode, m.view)
		}
	}
}

// A drill-down read that arrives after the operator left it, or for
// another row, changes nothing.
func TestALateDrillDownIsDropped(t *testing.T) {
	m := loaded(Options{Now: func() time.Time { return at }}, 80, 24)
	m = send(m, DetailMsg{View: Jobs, Key: "job-00001", Text: "late"})
	if m.mode != modeTable || len(m.detailLines) != 0 {
		t.Errorf("a late drill-down changed the screen: mode %v, lines %q", m.mode, m.detailLines)
	}
}

func TestOccurrenceCommandLineIsJobsWhyWithAtAndScope(t *testing.T) {
	o := Occurrence{Job: "cache-warm", At: time.Date(2026, 11, 30, 2, 0, 0, 500e6, time.UTC), Scope: "web-2"}
	if got, want := o.CommandLine(), "studioctl jobs why cache-warm --at 2026-11-30T02:00:00.5Z --scope web-2"; got != want {
		t.Errorf("CommandLine() = %q, want %q", got, want)
	}
}

// R releases a lock by force, whatever its holder: the confirmation says
// the holder is live and shows the command with --force, and y hands the
// actor the forced release (the verb's run function with Force, audited
// as the verb audits it). r on the same lock stays the plain release the
// verb refuses.
func TestRReleasesALockWithALiveHolderByForce(t *testing.T) {
	live := Table{Columns: locksTable().Columns, Rows: [][]output.Cell{plain("report", "held", "web-1", "live", "8s ago", "in 50s", "50s")}}
	for _, sz := range []struct{ w, h int }{{80, 24}, {160, 48}} {
		a := &fakeActor{}
		m := send(loaded(Options{Actor: a, Now: func() time.Time { return at }}, sz.w, sz.h), SnapshotMsg{View: Locks, Table: live, At: at})
		m, _ = run(m, append(keys("3R"), keys("web-1 hung")...)...)
		m, _ = run(m, key(tea.KeyEnter))
		v := m.View()
		for _, want := range []string{
			`release lock "report" by force? its holder web-1 is live`,
			"$ studioctl locks release report --force --reason 'web-1 hung' --yes",
			"its run may still be going",
		} {
			if !strings.Contains(v, want) {
				t.Errorf("%dx%d: the confirmation does not say %q:\n%s", sz.w, sz.h, want, v)
			}
		}
		golden(t, "locks-force-confirm-"+itoa(sz.w)+"x"+itoa(sz.h)+".txt", frame(t, m, sz.w, sz.h))
		m, _ = run(m, keys("y")...)
		want := Action{Verb: ReleaseLock, Target: "report", Reason: "web-1 hung", Force: true, Holder: "web-1", HolderState: "live"}
		if len(a.done) != 1 || a.done[0] != want {
			t.Fatalf("y did %+v, want %+v", a.done, want)
		}
		m, _ = run(m, append(keys("r"), key(tea.KeyEnter))...)
		if v := m.View(); strings.Contains(v, "--force") || strings.Contains(v, "by force") {
			t.Errorf("r asks for a forced release:\n%s", v)
		}
	}
}
