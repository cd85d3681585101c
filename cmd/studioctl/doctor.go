package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/studioctl/studioctl/internal/config"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/doctor"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/output"
	"github.com/studioctl/studioctl/internal/replicas"
)

// doctorOptions are the dependencies of doctor.
type doctorOptions struct {
	deps
	// ConnString resolves the database: doctor opens it itself, so the
	// tls check sees the configuration even when the server is down.
	ConnString func(context.Context) (string, error)
	// PoolConfig is an operator command's pool configuration for a URL.
	PoolConfig func(string) (*pgxpool.Config, error)
	// Config is the loaded configuration (its file's jobs give the
	// timeouts; replica.id the id the lock table is checked with).
	Config func() *config.Config
}

func newDoctorCmd(a *app, runF func(context.Context, *doctorOptions) error) *cobra.Command {
	o := &doctorOptions{deps: a.deps(), ConnString: a.connString, PoolConfig: a.cliPoolConfig, Config: func() *config.Config { return a.cfg }}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check the database, the schema, the clock, the bus, locks, replicas, leases and jobs",
		Long:  doctorLong(),
		Example: `  studioctl doctor
  studioctl doctor -o json | jq -r '.[] | select(.status != "ok") | .check'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return doctorRun(cmd.Context(), o)
		},
	}
	return withFormats(cmd, output.Table, output.JSON, output.YAML)
}

var doctorColumns = []output.Column{{Header: "CHECK"}, {Header: "STATUS"}, {Header: "DETAIL"}, {Header: "HINT"}}

func doctorTone(s doctor.Status) output.Tone {
	switch s {
	case doctor.OK:
		return output.Good
	case doctor.Warn:
		return output.Warn
	case doctor.Fail:
		return output.Bad
	default:
		return output.Dim
	}
}

// doctorRun runs the checks, prints them, and fails (exit 1) when one does.
func doctorRun(ctx context.Context, o *doctorOptions) error {
	cfg := o.Config()
	opts := doctor.Options{Now: o.Now, NowFixed: o.NowFixed, LockTable: o.LockTable(), ReplicaID: cfg.Replica.ID,
		MaxConcurrentRuns: cfg.Runner.MaxConcurrentRuns}
	if opts.ReplicaID == "" {
		opts.ReplicaID = replicas.DefaultID()
	}
	if cfg.File != "" {
		opts.Jobs, opts.JobsErr = jobs.ParseSection(cfg.File, cfg.Doc.Section("jobs"))
		opts.JobsSource = filepath.Base(cfg.File)
	}
	cs, err := o.ConnString(ctx)
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			return err
		}
		opts.OpenErr = err
	} else {
		pcfg, err := o.PoolConfig(cs)
		if err != nil {
			return &usageError{err: err}
		}
		opts.ConnConfig = pcfg.ConnConfig
		if l := cfg.Database.ListenURL; l != "" {
			if opts.ListenConnConfig, err = db.ParseConnConfig(l); err != nil {
				return usageErrorf("database.listen_url (STUDIO_DATABASE_LISTEN_URL): %v", err)
			}
		}
		pool, err := db.OpenConfig(ctx, pcfg, cs)
		if err != nil {
			opts.OpenErr = err
		} else {
			defer pool.Close()
			opts.Pool = pool
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	results := doctor.Run(ctx, opts)
	p := o.Printer()
	if p.Terminal() && !p.Structured() {
		if err := printDoctorTerminal(p, o.IO.Out, results, terminalWidth(o.Getenv, o.IO.Out)); err != nil {
			return err
		}
	} else {
		rows := make([][]output.Cell, 0, len(results))
		for _, r := range results {
			rows = append(rows, []output.Cell{{Text: r.Check}, {Text: string(r.Status), Tone: doctorTone(r.Status)}, {Text: r.Detail}, {Text: r.Hint}})
		}
		if err := p.Print(results, doctorColumns, rows); err != nil {
			return err
		}
	}
	if failed := doctor.Failed(results); len(failed) > 0 {
		n := "1 check"
		if len(failed) > 1 {
			n = fmt.Sprintf("%d checks", len(failed))
		}
		return fmt.Errorf("doctor: %s failed: %s", n, strings.Join(failed, ", "))
	}
	return nil
}

// doctorLong is doctor's help; the checks are listed from doctor.Names, so
// the list cannot miss one.
func doctorLong() string {
	names := doctor.Names()
	list := strings.Join(output.Wrap(fmt.Sprintf("Checks, in order (%d): %s.", len(names), strings.Join(names, ", ")), 76, "", ""), "\n")
	return `Run every health check and report each: ok, warn or fail, a one-line
detail, and a hint saying what to do. It reads only; it changes nothing.

` + list + `
docs/doctor.md says what each looks at, its thresholds and why it warns or
fails. When the database is unreachable, database fails and the checks that
need it say skip.

On a terminal: one line per check (its name, status and the start of its
detail, cut to the width: COLUMNS, else the terminal's), then the whole
detail and the hint of every check that is not ok, wrapped to that width.
Piped: one tab-separated line per check with the columns CHECK, STATUS,
DETAIL and HINT. -o json prints an array of objects with the keys check,
status, detail and hint.

It exits 1 when any check fails, 0 otherwise (warnings included).`
}

// Terminal widths for doctor: the fallback when neither COLUMNS nor the
// terminal says, and the narrowest it lays out for.
const (
	defaultTerminalWidth = 80
	minTerminalWidth     = 40
)

// terminalWidth is the width to lay out for: COLUMNS when it is a number,
// else the size of the terminal w is, else 80.
func terminalWidth(getenv func(string) string, w io.Writer) int {
	width := 0
	if n, err := strconv.Atoi(strings.TrimSpace(getenv("COLUMNS"))); err == nil && n > 0 {
		width = n
	} else if f, ok := w.(*os.File); ok {
		if n, _, err := term.GetSize(int(f.Fd())); err == nil && n > 0 {
			width = n
		}
	}
	if width == 0 {
		width = defaultTerminalWidth
	}
	return max(width, minTerminalWidth)
}

// printDoctorTerminal is doctor on a terminal: one line per check, its
// detail cut to fit the width, then every check that is not ok with its
// whole detail and hint, wrapped. A check whose line already shows all
// it has to say (a skip without hint) is not repeated.
func printDoctorTerminal(p *output.Printer, w io.Writer, results []doctor.Result, width int) error {
	const gap = 3 // output's column gap
	nameW, statusW := len("CHECK"), len("STATUS")
	for _, r := range results {
		nameW = max(nameW, output.Width(r.Check))
	}
	detailW := max(width-nameW-statusW-2*gap, 10)
	cols := []output.Column{{Header: "CHECK"}, {Header: "STATUS"}, {Header: "DETAIL"}}
	rows := make([][]output.Cell, 0, len(results))
	var more []doctor.Result
	for _, r := range results {
		detail := output.Safe(r.Detail)
		short := output.Truncate(detail, detailW)
		rows = append(rows, []output.Cell{{Text: r.Check}, {Text: string(r.Status), Tone: doctorTone(r.Status)}, {Text: short}})
		if r.Status != doctor.OK && (short != detail || r.Hint != "") {
			more = append(more, r)
		}
	}
	if err := p.Print(nil, cols, rows); err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	for _, r := range more {
		fmt.Fprintf(bw, "\n%s: %s\n", r.Check, p.Paint(doctorTone(r.Status), string(r.Status)))
		for _, l := range output.Wrap(output.Safe(r.Detail), width, "  ", "  ") {
			fmt.Fprintln(bw, l)
		}
		if r.Hint != "" {
			for _, l := range output.Wrap(output.Safe(r.Hint), width, "  hint: ", "        ") {
				fmt.Fprintln(bw, l)
			}
		}
	}
	return bw.Flush()
}
