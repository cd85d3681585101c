package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/doctor"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/output"
)

func TestDoctorHelpListsEveryCheck(t *testing.T) {
	t.Parallel()
	a := &app{stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, getenv: func(string) string { return "" }, now: time.Now}
	long := newDoctorCmd(a, nil).Long
	names := doctor.Names()
	if len(names) != 17 {
		t.Errorf("doctor.Names() has %d checks, want 17", len(names))
	}
	flat := strings.Join(strings.Fields(long), " ")
	for _, n := range names {
		if !strings.Contains(flat, " "+n+",") && !strings.Contains(flat, " "+n+".") {
			t.Errorf("doctor --help does not list the check %s:\n%s", n, long)
		}
	}
	if want := fmt.Sprintf("Checks, in order (%d):", len(names)); !strings.Contains(flat, want) {
		t.Errorf("doctor --help does not say %q", want)
	}
	for _, l := range strings.Split(long, "\n") {
		if len(l) > 80 {
			t.Errorf("help line longer than 80 columns: %q", l)
		}
	}
}

func TestTerminalWidthComesFromColumnsThenTheTerminal(t *testing.T) {
	t.Parallel()
	for cols, want := range map[string]int{"100": 100, "": 80, "wide": 80, "-3": 80, "10": 40} {
		getenv := func(k string) string {
			if k == "COLUMNS" {
				return cols
			}
			return ""
		}
		if got := terminalWidth(getenv, &bytes.Buffer{}); got != want {
			t.Errorf("COLUMNS=%q: width %d, want %d", cols, got, want)
		}
	}
}

func TestDoctorOnATerminalFitsTheWidthAndExplainsWhatIsNotOK(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a long detail that goes on ", 8) + "and ends here"
	results := []doctor.Result{
		{Check: "database", Status: doctor.OK, Detail: "reachable; PostgreSQL 17.2"},
		{Check: "stale_locks", Status: doctor.Fail, Detail: long, Hint: "studioctl locks release sweep --reason \"...\" (safe: the holder is gone, no --force needed); then see crashed_replicas"},
		{Check: "bus", Status: doctor.Skip, Detail: "not checked: the database is unreachable"},
		{Check: "near_timeout", Status: doctor.Warn, Detail: "short", Hint: "raise the job's timeout"},
		{Check: "tls", Status: doctor.OK, Detail: long},
	}
	for _, width := range []int{80, 60, 40} {
		var out bytes.Buffer
		p := output.New(&out, output.Table, output.Options{Terminal: true, NoColor: true})
		if err := printDoctorTerminal(p, &out, results, width); err != nil {
			t.Fatal(err)
		}
		text := out.String()
		for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
			if output.Width(l) > width {
				t.Errorf("width %d: line of %d columns: %q", width, output.Width(l), l)
			}
		}
		head, tail, ok := strings.Cut(text, "\n\n")
		if !ok {
			t.Fatalf("width %d: no section after the table:\n%s", width, text)
		}
		if n := strings.Count(head, "\n"); n != len(results) { // the header and one line per check
			t.Errorf("width %d: table of %d lines, want %d:\n%s", width, n+1, len(results)+1, head)
		}
		flat := strings.Join(strings.Fields(tail), " ")
		for _, want := range []string{"stale_locks: fail " + strings.Join(strings.Fields(long), " "), "hint: studioctl locks release sweep",
			"near_timeout: warn short hint: raise the job's timeout"} {
			if !strings.Contains(flat, want) {
				t.Errorf("width %d: the section lacks %q:\n%s", width, want, tail)
			}
		}
		// An ok is not repeated; nor is a skip whose line says it all
		// (at 80 columns), while a cut one is.
		sections := "\n" + tail
		if strings.Contains(sections, "\ntls:") || strings.Contains(sections, "\ndatabase:") || strings.Contains(sections, "\nbus:") != (width < 80) {
			t.Errorf("width %d: the section repeats a check with nothing more to say, or leaves out a cut one:\n%s", width, tail)
		}
	}
}

// Every not-found of jobs output exits 4, as the help says.
func TestJobsOutputNotFoundExitsFour(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		fmt.Errorf("run 9: %w", jobstore.ErrUnknownRun),
		fmt.Errorf("run 9 of job %q: %w", "x", jobstore.ErrNoOutput),
		fmt.Errorf("job %q: %w", "x", jobstore.ErrUnknownJob),
	} {
		if got := exitCode(err); got != exitNotFound {
			t.Errorf("exitCode(%v) = %d, want %d", err, got, exitNotFound)
		}
	}
}
