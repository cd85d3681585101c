package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/studioctl/studioctl/internal/audit"
	"github.com/studioctl/studioctl/internal/config"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/embedded"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/migrate"
	"github.com/studioctl/studioctl/internal/output"
	"github.com/studioctl/studioctl/internal/replicas"
)

// Exit codes (SPEC §9), documented in --help.
const (
	exitOK       = 0 // success
	exitFailure  = 1 // database unreachable, unexpected error
	exitUsage    = 2 // usage or configuration error
	exitRefused  = 3 // refused for safety: --force would be needed
	exitNotFound = 4 // not found
)

const exitCodesHelp = `Exit codes:
  0  success
  1  failure (database unreachable, unexpected error)
  2  usage or configuration error
  3  refused for safety (--force would be needed)
  4  not found`

// envForceTTY makes studioctl treat stdin/stdout as a terminal (for tests of
// the terminal rendering and the confirmation prompt).
const envForceTTY = "STUDIO_FORCE_TTY"

// cliPoolMaxConns bounds the pool of an operator command.
const cliPoolMaxConns = 4

// usageError is a bad argument or flag (exit 2).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// exitCode maps an error to the documented exit codes, in one place.
func exitCode(err error) int {
	var ue *usageError
	var ce *config.Error
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, locks.ErrRefused), errors.Is(err, replicas.ErrLive), errors.Is(err, embedded.ErrInUse):
		return exitRefused
	case errors.Is(err, locks.ErrNotFound), errors.Is(err, replicas.ErrNotFound), errors.Is(err, jobstore.ErrUnknownJob):
		return exitNotFound
	case errors.As(err, &ue), errors.As(err, &ce), errors.Is(err, locks.ErrInvalid), errors.Is(err, output.ErrFormat),
		errors.Is(err, jobs.ErrSchedule), jobs.IsConfigError(err),
		errors.Is(err, migrate.ErrNewerSchema),
		strings.HasPrefix(err.Error(), "unknown command"):
		return exitUsage
	default:
		return exitFailure
	}
}

// app holds what commands depend on, built per invocation and lazily.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	stdinTTY       bool
	stdoutTTY      bool
	now            func() time.Time

	// Set by the root's PersistentPreRunE.
	configFile string
	cfg        *config.Config
	format     output.Format

	pool *pgxpool.Pool
	// migrated: connString already applied the migrations (embedded default).
	migrated bool
}

// Main runs studioctl with os.Args and returns the exit code.
func Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a := &app{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr,
		getenv: os.Getenv, now: time.Now,
		stdinTTY:  term.IsTerminal(int(os.Stdin.Fd())),
		stdoutTTY: term.IsTerminal(int(os.Stdout.Fd())),
	}
	if os.Getenv(envForceTTY) != "" {
		a.stdinTTY, a.stdoutTTY = true, true
	}
	return a.run(ctx, os.Args[1:])
}

func (a *app) run(ctx context.Context, args []string) int {
	root := a.newRootCmd()
	root.SetArgs(args)
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if a.pool != nil {
		a.pool.Close()
	}
	switch {
	case db.IsReadOnly(err):
		// Name the command: on a standby or a read-only database the
		// server's own text says only which statement it refused.
		err = fmt.Errorf("%s: %w", strings.TrimPrefix(cmd.CommandPath(), root.Name()+" "), db.ExplainReadOnly(err))
	case db.IsPermissionDenied(err):
		// The same for a role without the privilege (docs/roles.md).
		err = fmt.Errorf("%s: %w", strings.TrimPrefix(cmd.CommandPath(), root.Name()+" "), db.ExplainPermission(err))
	}
	if err != nil {
		// A closed stderr must not turn the documented exit code into
		// death by SIGPIPE on this last line.
		signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
		fmt.Fprintln(a.stderr, "error:", err)
		return exitCode(err)
	}
	return exitOK
}

func (a *app) newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "studioctl",
		Short: "Host a replica, and operate the locks, jobs, replicas and leases replicas share in PostgreSQL",
		Long: `studioctl hosts a replica (studioctl run) and is the operator's tool for the
tables replicas share in PostgreSQL: the ShedLock-compatible lock table, job
status and history, the replica registry and cluster leases.

With no database configured (no --database-url, STUDIO_DATABASE_URL, PG*
variables or config file entry), studioctl runs a local PostgreSQL of its own
from the binaries on the machine and says so on stderr.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.load(cmd)
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err: err} })
	pf := root.PersistentFlags()
	pf.StringVar(&a.configFile, "config", "", "config file (default ./studio.yaml, then $XDG_CONFIG_HOME/studioctl/config.yaml)")
	pf.String("database-url", "", "PostgreSQL URL or keyword/value string (env STUDIO_DATABASE_URL)")
	pf.StringP("output", "o", "table", "output format: table|wide|json|yaml")
	pf.Bool("no-color", false, "disable colour (also NO_COLOR)")
	pf.String("actor", "", "who to record in the audit log (default $USER@host)")

	root.AddCommand(
		a.newRunCmd(),
		a.newJobsCmd(),
		a.newLocksCmd(),
		a.newReplicasCmd(),
		a.newEventsCmd(),
		a.newMigrateCmd(),
		a.newEmbeddedCmd(),
		a.newConfigCmd(),
		a.newVersionCmd(),
	)
	// Every command's help ends with the exit codes.
	root.SetHelpTemplate(root.HelpTemplate() + "\n" + exitCodesHelp + "\n")
	return root
}

// load reads the configuration once the flags are parsed.
func (a *app) load(cmd *cobra.Command) error {
	pf := cmd.Root().PersistentFlags()
	bind := []config.FlagBinding{
		{Key: "database.url", Flag: pf.Lookup("database-url")},
		{Key: "output", Flag: pf.Lookup("output")},
		{Key: "no_color", Flag: pf.Lookup("no-color")},
		{Key: "actor", Flag: pf.Lookup("actor")},
	}
	cfg, _, err := config.Load(a.configFile, a.getenv, bind)
	if err != nil {
		return err
	}
	f, err := output.ParseFormat(cfg.Output)
	if err != nil {
		return err
	}
	a.cfg, a.format = cfg, f
	return nil
}

// printer returns a printer for stdout.
func (a *app) printer() *output.Printer {
	noColor := a.cfg.NoColor || a.getenv("NO_COLOR") != ""
	return output.New(a.stdout, a.format, output.Options{Terminal: a.stdoutTTY, NoColor: noColor, Now: a.now})
}

// actor is --actor, or $USER@host.
func (a *app) actor() string {
	if a.cfg.Actor != "" {
		return a.cfg.Actor
	}
	return audit.DefaultActor()
}

// pgEnvVars, when any is set, mean the user configured a database through
// libpq's environment.
var pgEnvVars = []string{"PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD", "PGSERVICE"}

// connString resolves the database: the configured URL, the PG* variables,
// or the embedded default.
func (a *app) connString(ctx context.Context) (string, error) {
	if a.cfg.Database.URL != "" {
		return a.cfg.Database.URL, nil
	}
	for _, k := range pgEnvVars {
		if a.getenv(k) != "" {
			return "", nil
		}
	}
	e := a.embedded()
	url, started, err := e.Ensure(ctx)
	if err != nil {
		return "", err
	}
	if started {
		fmt.Fprintf(a.stderr, "started the embedded database in %s\n", e.Dir)
	}
	// url holds the password: only its redacted form is shown.
	fmt.Fprintf(a.stderr, "using the embedded database %s, password in %s (set database.url or STUDIO_DATABASE_URL to use another)\n",
		db.Redact(url), e.PasswordFile())
	pool, err := db.Open(ctx, url)
	if err != nil {
		return "", err
	}
	defer pool.Close()
	if _, err := migrate.Up(ctx, pool); err != nil {
		return "", err
	}
	a.migrated = true
	return url, nil
}

func (a *app) embedded() *embedded.Embedded {
	dir := a.cfg.Embedded.Dir
	if dir == "" {
		dir = embedded.DefaultDir(a.getenv)
	}
	return &embedded.Embedded{Dir: dir}
}

// db opens (once) the pool for this invocation.
func (a *app) db(ctx context.Context) (*pgxpool.Pool, error) {
	if a.pool != nil {
		return a.pool, nil
	}
	cs, err := a.connString(ctx)
	if err != nil {
		return nil, err
	}
	cfg, err := db.ParsePoolConfig(cs)
	if err != nil {
		return nil, &usageError{err: err}
	}
	cfg.MaxConns = cliPoolMaxConns
	pool, err := db.OpenConfig(ctx, cfg, cs)
	if err != nil {
		return nil, err
	}
	a.pool = pool
	return pool, nil
}

// confirm asks on a terminal unless yes; without a terminal it does not ask.
func (a *app) confirm(question string, yes bool) (bool, error) {
	if yes || !a.stdinTTY {
		return true, nil
	}
	fmt.Fprintf(a.stderr, "%s [y/N] ", question)
	line, err := bufio.NewReader(a.stdin).ReadString('\n')
	if err != nil && line == "" {
		return false, nil
	}
	answer := strings.ToLower(strings.TrimSpace(line))
	return answer == "y" || answer == "yes", nil
}

// noArgs and exactArgs return usage errors (exit 2) naming what is wrong.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < len(names) {
			return usageErrorf("%s: missing argument %s (usage: %s)", cmd.CommandPath(), strings.ToUpper(names[len(args)]), cmd.UseLine())
		}
		if len(args) > len(names) {
			return usageErrorf("%s: unexpected argument %q (usage: %s)", cmd.CommandPath(), args[len(names)], cmd.UseLine())
		}
		return nil
	}
}

func noArgs(cmd *cobra.Command, args []string) error { return exactArgs()(cmd, args) }

// lockTable is the configured lock table.
func (a *app) lockTable() locks.Table {
	c := a.cfg.Locks
	return locks.Table{Name: c.Table, NameCol: c.Columns.Name, LockUntil: c.Columns.LockUntil, LockedAt: c.Columns.LockedAt, LockedBy: c.Columns.LockedBy}
}
