package output

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mattn/go-runewidth"
	"gopkg.in/yaml.v3"
)

var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

type row struct {
	Name  string `json:"name" yaml:"name"`
	State string `json:"state" yaml:"state"`
}

var (
	testCols = []Column{{Header: "NAME"}, {Header: "STATE"}, {Header: "HOST", Wide: true}, {Header: "NOTE"}}
	testRows = [][]Cell{
		{{Text: "alpha"}, {Text: "live", Tone: Good}, {Text: "h1"}, {Text: "ok"}},
		{{Text: "日本語"}, {Text: "crashed", Tone: Bad}, {Text: ""}, {Text: "x"}},
		{{Text: "b"}, {Text: "", Tone: Dim}, {Text: "host-two"}, {Text: ""}},
	}
)

func TestParseFormat(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Format
		wantErr bool
	}{
		{"table is accepted", "table", Table, false},
		{"wide is accepted", "wide", Wide, false},
		{"json is accepted", "json", JSON, false},
		{"yaml is accepted", "yaml", YAML, false},
		{"an empty value is rejected", "", "", true},
		{"an unknown value is rejected", "xml", "", true},
		{"upper case is rejected", "JSON", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseFormat(tt.in)
			if tt.wantErr {
				if !errors.Is(err, ErrFormat) {
					t.Fatalf("ParseFormat(%q) error = %v, want ErrFormat", tt.in, err)
				}
				if !strings.Contains(err.Error(), tt.in) {
					t.Errorf("error %q does not name the value %q", err, tt.in)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseFormat(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

// columnStarts returns the display column at which each cell of a line
// starts. The test cells contain no spaces, so a cell starts wherever a
// non-space follows a space or the start of the line.
func columnStarts(line string) []int {
	var starts []int
	col, prevSpace := 0, true
	for _, r := range line {
		if r != ' ' && prevSpace {
			starts = append(starts, col)
		}
		prevSpace = r == ' '
		col += runewidth.RuneWidth(r)
	}
	return starts
}

func TestTable(t *testing.T) {
	tests := []struct {
		name      string
		format    Format
		opts      Options
		wantColor bool
		tsv       bool
		wantLines []string
	}{
		{
			name: "a table off a terminal is tab-separated without colour, empty cells empty", format: Table,
			opts: Options{}, tsv: true,
			wantLines: []string{
				"NAME\tSTATE\tNOTE",
				"alpha\tlive\tok",
				"日本語\tcrashed\tx",
				"b\t\t",
			},
		},
		{
			name: "a wide table off a terminal adds the wide columns, tab-separated", format: Wide,
			opts: Options{}, tsv: true,
			wantLines: []string{
				"NAME\tSTATE\tHOST\tNOTE",
				"alpha\tlive\th1\tok",
				"日本語\tcrashed\t\tx",
				"b\t\thost-two\t",
			},
		},
		{
			name: "a table on a terminal with NoColor has no colour", format: Table,
			opts: Options{Terminal: true, NoColor: true},
			wantLines: []string{
				"NAME     STATE     NOTE",
				"alpha    live      ok",
				"日本語   crashed   x",
				"b        -         -",
			},
		},
		{
			name: "a table on a terminal is coloured and stays aligned", format: Table,
			opts: Options{Terminal: true}, wantColor: true,
			wantLines: []string{
				"NAME     STATE     NOTE",
				"alpha    live      ok",
				"日本語   crashed   x",
				"b        -         -",
			},
		},
		{
			name: "a wide table on a terminal is coloured and stays aligned", format: Wide,
			opts: Options{Terminal: true}, wantColor: true,
			wantLines: []string{
				"NAME     STATE     HOST       NOTE",
				"alpha    live      h1         ok",
				"日本語   crashed   -          x",
				"b        -         host-two   -",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			p := New(&buf, tt.format, tt.opts)
			if err := p.Print(nil, testCols, testRows); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			hasANSI := strings.Contains(out, "\x1b[")
			if hasANSI != tt.wantColor {
				t.Fatalf("colour codes present = %v, want %v; output:\n%q", hasANSI, tt.wantColor, out)
			}
			plain := ansi.ReplaceAllString(out, "")
			got := strings.Split(strings.TrimSuffix(plain, "\n"), "\n")
			if strings.Join(got, "\n") != strings.Join(tt.wantLines, "\n") {
				t.Fatalf("table =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.wantLines, "\n"))
			}
			if tt.tsv {
				return
			}
			// Every line's cells start at the same display columns.
			first := columnStarts(got[0])
			for _, l := range got[1:] {
				if s := columnStarts(l); len(s) != len(first) || !equalInts(s, first) {
					t.Errorf("line %q starts columns at %v, header at %v", l, s, first)
				}
			}
		})
	}
}

func TestColourCodesMarkTones(t *testing.T) {
	var buf bytes.Buffer
	p := New(&buf, Table, Options{Terminal: true})
	if err := p.Print(nil, testCols, testRows); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		code string
	}{
		{"a good cell is green", "\x1b[32mlive"},
		{"a bad cell is red", "crashed"},
		{"the header is bold", "\x1b[1mNAME"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(buf.String(), tt.code) {
				t.Fatalf("output lacks %q:\n%q", tt.code, buf.String())
			}
		})
	}
	if !regexp.MustCompile("\x1b\\[[0-9;]*31[0-9;]*mcrashed").MatchString(buf.String()) {
		t.Errorf("crashed is not red: %q", buf.String())
	}
}

func equalInts(a, b []int) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestStructured(t *testing.T) {
	data := []row{{Name: "a", State: "live"}, {Name: "b", State: "gone"}}
	tests := []struct {
		name   string
		format Format
		opts   Options
		decode func([]byte, any) error
	}{
		{"json is indented and decodes back", JSON, Options{}, json.Unmarshal},
		{"json on a colour terminal has no colour", JSON, Options{Terminal: true}, json.Unmarshal},
		{"yaml decodes back", YAML, Options{}, yaml.Unmarshal},
		{"yaml on a colour terminal has no colour", YAML, Options{Terminal: true}, yaml.Unmarshal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			p := New(&buf, tt.format, tt.opts)
			if !p.Structured() {
				t.Errorf("Structured() = false for %s", tt.format)
			}
			if err := p.Print(data, testCols, testRows); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(buf.String(), "\x1b[") {
				t.Fatalf("structured output has colour codes: %q", buf.String())
			}
			var got []row
			if err := tt.decode(buf.Bytes(), &got); err != nil {
				t.Fatalf("decode %q: %v", buf.String(), err)
			}
			if len(got) != 2 || got[0] != data[0] || got[1] != data[1] {
				t.Fatalf("decoded %+v, want %+v", got, data)
			}
			if tt.format == JSON && !strings.Contains(buf.String(), "\n  {") {
				t.Errorf("json is not indented by two spaces: %q", buf.String())
			}
			if tt.format == YAML && !strings.Contains(buf.String(), "- name: a\n  state: live\n") {
				t.Errorf("yaml is not indented by two spaces: %q", buf.String())
			}
		})
	}
}

func TestTime(t *testing.T) {
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	la := time.FixedZone("PDT", -7*3600)
	tests := []struct {
		name string
		opts Options
		in   time.Time
		want string
	}{
		{"off a terminal a time is RFC 3339 in UTC", Options{Now: func() time.Time { return now }}, now.Add(-12 * time.Second).In(la), "2024-05-01T11:59:48Z"},
		{"off a terminal a future time is RFC 3339 in UTC", Options{}, now.Add(time.Hour).In(la), "2024-05-01T13:00:00Z"},
		{"on a terminal a past time is how long ago", Options{Terminal: true, Now: func() time.Time { return now }}, now.Add(-12 * time.Second), "12s ago"},
		{"on a terminal a future time is how long until", Options{Terminal: true, Now: func() time.Time { return now }}, now.Add(30 * time.Second), "in 30s"},
		{"on a terminal without colour times are still relative", Options{Terminal: true, NoColor: true, Now: func() time.Time { return now }}, now.Add(-4*time.Minute - 10*time.Second), "4m10s ago"},
		{"on a terminal the present is zero ms ago", Options{Terminal: true, Now: func() time.Time { return now }}, now, "0ms ago"},
		{"the zero time is empty", Options{Terminal: true}, time.Time{}, ""},
		{"the zero time is empty off a terminal", Options{}, time.Time{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New(&bytes.Buffer{}, Table, tt.opts)
			if got := p.Time(tt.in); got != tt.want {
				t.Fatalf("Time(%v) = %q, want %q", tt.in, got, tt.want)
			}
			in := tt.in
			if got := p.TimePtr(&in); got != tt.want {
				t.Fatalf("TimePtr(%v) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
	if got := New(&bytes.Buffer{}, Table, Options{}).TimePtr(nil); got != "" {
		t.Errorf("TimePtr(nil) = %q, want empty", got)
	}
}

func TestDuration(t *testing.T) {
	tests := []struct {
		name string
		in   time.Duration
		want string
	}{
		{"zero is 0ms", 0, "0ms"},
		{"under a second is milliseconds", 850 * time.Millisecond, "850ms"},
		{"one second is 1s", time.Second, "1s"},
		{"seconds are truncated", 12*time.Second + 900*time.Millisecond, "12s"},
		{"minutes show seconds", 4*time.Minute + 10*time.Second, "4m10s"},
		{"a whole minute shows zero seconds", time.Minute, "1m0s"},
		{"hours show minutes", 3*time.Hour + 5*time.Minute, "3h5m"},
		{"up to two days is hours", 47*time.Hour + 59*time.Minute, "47h59m"},
		{"two days and more is days and hours", 52 * time.Hour, "2d4h"},
		{"a negative duration has a minus sign", -12 * time.Second, "-12s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Duration(tt.in); got != tt.want {
				t.Fatalf("Duration(%s) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestFormatAndTerminalAccessors(t *testing.T) {
	tests := []struct {
		name       string
		format     Format
		opts       Options
		structured bool
	}{
		{"a table printer is not structured", Table, Options{Terminal: true}, false},
		{"a wide printer is not structured", Wide, Options{}, false},
		{"a json printer is structured", JSON, Options{}, true},
		{"a yaml printer is structured", YAML, Options{Terminal: true}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New(&bytes.Buffer{}, tt.format, tt.opts)
			if p.Format() != tt.format || p.Terminal() != tt.opts.Terminal || p.Structured() != tt.structured {
				t.Fatalf("Format %q Terminal %v Structured %v", p.Format(), p.Terminal(), p.Structured())
			}
		})
	}
}

// A piped table splits on tabs whatever the values hold: a value with spaces
// stays one field, and a tab or newline inside a value becomes a space.
func TestPipedTableSplitsOnTabs(t *testing.T) {
	var buf bytes.Buffer
	p := New(&buf, Table, Options{})
	cols := []Column{{Header: "ID"}, {Header: "SCHEDULE"}, {Header: "ERROR"}}
	rows := [][]Cell{{{Text: "nightly"}, {Text: "cron 0 3 * * *", Tone: Good}, {Text: "exit 1\tthen\nmore"}}}
	if err := p.Print(nil, cols, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2: %q", len(lines), buf.String())
	}
	got := strings.Split(lines[1], "\t")
	want := []string{"nightly", "cron 0 3 * * *", "exit 1 then more"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("fields = %q, want %q", got, want)
	}
}

// Found by the adversarial pass over issue 7: a row that another role
// writes (a Java node's locked_by, a job's error) reached the terminal raw,
// so it could clear the screen or set the window title.
func TestControlCharactersInValuesAreShownEscaped(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain text", "plain text"},
		{"größe ü", "größe ü"},
		{"\x1b[2Jevil", `\x1b[2Jevil`},
		{"\x1b]0;pwned\x07", `\x1b]0;pwned\x07`},
		{"a\x00b\x7fc", `a\x00b\x7fc`},
		{"c1\u009b31m", `c1\x9b31m`},
		{"abc\u202edcba", `abc\u202edcba`},
		{"\u2066iso\u2069", `\u2066iso\u2069`},
		{"bad\x9b[2J", `bad\x9b[2J`},
	} {
		if got := Safe(tc.in); got != tc.want {
			t.Errorf("Safe(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, tty := range []bool{false, true} {
		var b strings.Builder
		p := New(&b, Table, Options{Terminal: tty})
		if err := p.Print(nil, []Column{{Header: "NAME"}}, [][]Cell{{{Text: "\x1b[2Jevil"}}}); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(b.String(), "\x1b[2J") {
			t.Errorf("terminal=%v: the escape sequence reached the output: %q", tty, b.String())
		}
	}
}
