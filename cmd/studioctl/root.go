package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/studioctl/studioctl/internal/audit"
	"github.com/studioctl/studioctl/internal/config"
	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/embedded"
	"github.com/studioctl/studioctl/internal/host"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/leases"
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

// envForceTTY makes studioctl treat the named streams as terminals, for
// tests of the terminal rendering, the confirmation prompt and the log
// format: a comma-separated list of stdin, stdout and stderr; "1" or "all"
// means all three (docs/output.md).
const envForceTTY = "STUDIO_FORCE_TTY"

// envNow fixes the time studioctl shows as "now" (RFC 3339): relative times,
// ages and remaining times in output. A test hook for stable output; it
// never decides anything, which database time does (docs/output.md).
const envNow = "STUDIO_NOW"

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
	case errors.Is(err, locks.ErrRefused), errors.Is(err, replicas.ErrLive), errors.Is(err, embedded.ErrInUse), errors.Is(err, leases.ErrRefused),
		errors.Is(err, jobstore.ErrDeclared):
		return exitRefused
	case errors.Is(err, replicas.ErrAhead): // replicas forget without --force
		return exitRefused
	case errors.Is(err, locks.ErrNotFound), errors.Is(err, replicas.ErrNotFound), errors.Is(err, jobstore.ErrUnknownJob), errors.Is(err, leases.ErrNotFound):
		return exitNotFound
	case errors.Is(err, jobstore.ErrUnknownRun), errors.Is(err, jobstore.ErrNoOutput):
		return exitNotFound
	case errors.Is(err, host.ErrInterrupted):
		// A replica stopped at once by a second signal did not drain:
		// exit 1, deliberately (run --help, docs/replica-start.md).
		return exitFailure
	case errors.As(err, &ue), errors.As(err, &ce), errors.Is(err, locks.ErrInvalid), errors.Is(err, output.ErrFormat), errors.Is(err, leases.ErrInvalid),
		errors.Is(err, jobs.ErrSchedule), jobs.IsConfigError(err),
		errors.Is(err, migrate.ErrNewerSchema):
		return exitUsage
	default:
		return exitFailure
	}
}

// app holds what commands depend on, built per invocation and lazily: the
// factory every command's options take their dependencies from.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	stdinTTY       bool
	stdoutTTY      bool
	stderrTTY      bool
	now            func() time.Time
	// nowFixed: STUDIO_NOW set the display clock.
	nowFixed bool

	// Set by the root's PersistentPreRunE.
	configFile string
	cfg        *config.Config
	format     output.Format

	pool *pgxpool.Pool
	// sessionPool is database.listen_url's, when set (sessionDB).
	sessionPool *pgxpool.Pool
	// hostMigrates: this invocation is run, whose host applies the
	// migrations (host.Prepare, database.migrate): openDatabase leaves the
	// embedded default's schema to it and says which database it uses
	// (docs/embedded.md).
	hostMigrates bool
	// embeddedSQLURL: the embedded default's login for sql: jobs
	// (embedded.SQLJobUser), set by openDatabase when it uses that
	// database.
	embeddedSQLURL string
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
		stderrTTY: term.IsTerminal(int(os.Stderr.Fd())),
	}
	return a.run(ctx, os.Args[1:])
}

// applyEnv applies the test hooks of the injected environment: the
// per-stream terminal override and the display clock.
func (a *app) applyEnv() error {
	if v := a.getenv(envForceTTY); v != "" {
		for _, name := range strings.Split(v, ",") {
			switch strings.TrimSpace(name) {
			case "1", "all", "true":
				a.stdinTTY, a.stdoutTTY, a.stderrTTY = true, true, true
			case "stdin":
				a.stdinTTY = true
			case "stdout":
				a.stdoutTTY = true
			case "stderr":
				a.stderrTTY = true
			default:
				return usageErrorf("%s: unknown stream %q: want a comma-separated list of stdin, stdout, stderr (or all)", envForceTTY, name)
			}
		}
	}
	if v := a.getenv(envNow); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return usageErrorf("%s: %q is not an RFC 3339 time (for example 2026-11-30T07:00:00Z)", envNow, v)
		}
		a.now, a.nowFixed = func() time.Time { return t }, true
	}
	return nil
}

func (a *app) run(ctx context.Context, args []string) int {
	if err := a.applyEnv(); err != nil {
		fmt.Fprintln(a.stderr, "error:", err)
		return exitCode(err)
	}
	root := a.newRootCmd()
	root.SetArgs(args)
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if a.sessionPool != nil {
		a.sessionPool.Close()
	}
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
from the binaries on the machine: the command that starts it says so on
stderr, and run names it (docs/embedded.md).`,
		SilenceErrors: true,
		SilenceUsage:  true,
		// An unknown command is a usage error from this validator, not a
		// string of cobra's to match.
		Args: groupArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.load(cmd)
		},
	}
	// Every bad flag (unknown, missing value, bad value) is a usage error.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err: err} })
	pf := root.PersistentFlags()
	pf.StringVar(&a.configFile, "config", "", "config file (default ./studio.yaml, then $XDG_CONFIG_HOME/studioctl/config.yaml)")
	pf.String("database-url", "", "PostgreSQL URL or keyword/value string (env STUDIO_DATABASE_URL)")
	pf.StringP("output", "o", "table", "output format: table|wide|json|yaml, as the command allows")
	pf.Bool("no-color", false, "disable colour (also NO_COLOR)")
	pf.String("actor", "", "who to record in the audit log (default user@host: $USER, else $LOGNAME, else the uid's name)")

	root.AddCommand(
		newRunCmd(a, nil),
		a.newJobsCmd(),
		a.newLocksCmd(),
		a.newReplicasCmd(),
		a.newLeasesCmd(),
		newDemoCmd(a, nil),
		newEventsCmd(a, nil),
		newDoctorCmd(a, nil),
		newTopCmd(a, nil),
		a.newMigrateCmd(),
		a.newEmbeddedCmd(),
		a.newConfigCmd(),
		newVersionCmd(a, nil),
		newProbeCmd(a, nil),
	)
	// --version prints what the version command prints, with no
	// configuration or database read (cobra handles it before any hook).
	root.Version = versionLine()
	root.SetVersionTemplate("{{.Version}}\n")
	// Every verb's help names the -o formats it prints; every list verb
	// answers to ls too.
	var describe func(*cobra.Command)
	describe = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			describe(sub)
		}
		if c.Name() == "list" && !slices.Contains(c.Aliases, "ls") {
			c.Aliases = append(c.Aliases, "ls")
		}
		if c.HasSubCommands() || !c.Runnable() || c == root || c.Annotations[noOutputAnnotation] != "" {
			return
		}
		long := c.Long
		if long == "" {
			long = c.Short + "."
		}
		c.Long = long + "\n\nOutput (-o): " + joinFormats(commandFormats(c)) + "."
	}
	describe(root)
	a.addCompletions(root)
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
		if cmd.Name() == cobra.ShellCompRequestCmd {
			return nil // completion is silent: it completes no names then
		}
		return err
	}
	f, err := output.ParseFormat(cfg.Output)
	if err != nil {
		return &usageError{err: err}
	}
	allowed := commandFormats(cmd)
	if !slices.Contains(allowed, f) {
		if pf.Changed("output") && cmd.Annotations[noOutputAnnotation] != "" {
			return usageErrorf("-o/--output %s: %q prints nothing on stdout (its logs go to stderr)", f, cmd.CommandPath())
		}
		if pf.Changed("output") {
			return usageErrorf("-o/--output %s: %q does not print %s; it allows %s", f, cmd.CommandPath(), f, joinFormats(allowed))
		}
		// A default from the environment or the config file that this
		// command cannot print falls back to its table.
		f = output.Table
	}
	a.cfg, a.format = cfg, f
	return nil
}

// formatsAnnotation names the -o values a command allows, comma-separated.
const formatsAnnotation = "studioctl/output-formats"

// noOutputAnnotation marks a command that prints nothing on stdout (run:
// its logs go to stderr): its help names no -o formats.
const noOutputAnnotation = "studioctl/no-output"

// withoutOutput declares that cmd prints nothing -o could shape.
func withoutOutput(cmd *cobra.Command) *cobra.Command {
	withFormats(cmd, output.Table)
	cmd.Annotations[noOutputAnnotation] = "true"
	return cmd
}

// withFormats declares the -o values cmd allows; a command that declares
// none allows only the table (its plain text).
func withFormats(cmd *cobra.Command, fs ...output.Format) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = string(f)
	}
	cmd.Annotations[formatsAnnotation] = strings.Join(names, ",")
	return cmd
}

// listFormats are the formats of every list command.
var listFormats = []output.Format{output.Table, output.Wide, output.JSON, output.YAML}

func commandFormats(cmd *cobra.Command) []output.Format {
	v := cmd.Annotations[formatsAnnotation]
	if v == "" {
		return []output.Format{output.Table}
	}
	var fs []output.Format
	for _, n := range strings.Split(v, ",") {
		fs = append(fs, output.Format(n))
	}
	return fs
}

func joinFormats(fs []output.Format) string {
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = string(f)
	}
	return strings.Join(names, ", ")
}

// printer returns a printer for stdout.
func (a *app) printer() *output.Printer {
	noColor := a.cfg.NoColor || a.getenv("NO_COLOR") != ""
	return output.New(a.stdout, a.format, output.Options{Terminal: a.stdoutTTY, NoColor: noColor, Now: a.now})
}

// actor is --actor, or the default actor (audit.DefaultActor) from the injected environment.
func (a *app) actor() string {
	if a.cfg.Actor != "" {
		return a.cfg.Actor
	}
	return audit.DefaultActor(a.getenv)
}

// pgEnvVars, when any is set, mean the user configured a database through
// libpq's environment.
var pgEnvVars = []string{"PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD", "PGSERVICE"}

// pgEnv reports whether a PG* variable configures the database.
func (a *app) pgEnv() bool {
	for _, k := range pgEnvVars {
		if a.getenv(k) != "" {
			return true
		}
	}
	return false
}

// dbTarget is the database an invocation uses, as the configuration and
// the environment name it.
type dbTarget struct {
	URL      string             // database.url (STUDIO_DATABASE_URL, --database-url)
	PGEnv    bool               // no URL: libpq's PG* variables configure it ("" as the URL)
	Embedded *embedded.Embedded // neither: the embedded default, not started
}

// resolveDatabase says which database this invocation uses: the configured
// URL, the PG* variables, or the embedded default. It is pure: it starts,
// connects to and writes nothing.
func (a *app) resolveDatabase() dbTarget {
	switch {
	case a.cfg.Database.URL != "":
		return dbTarget{URL: a.cfg.Database.URL}
	case a.pgEnv():
		return dbTarget{PGEnv: true}
	default:
		return dbTarget{Embedded: a.embedded()}
	}
}

// openDatabase is the one step on the way to the database that has side
// effects, and only on the embedded default: it starts the server (when
// not running) and, with database.migrate on, applies the migrations. On
// run it leaves the migrations to the host (host.Prepare applies them with
// database.migrate on, on any database) and says which database it uses.
// It returns the connection string ("" for the PG* variables).
func (a *app) openDatabase(ctx context.Context, t dbTarget) (string, error) {
	if t.Embedded == nil {
		return t.URL, nil
	}
	e := t.Embedded
	url, started, err := e.Ensure(ctx)
	if err != nil {
		return "", err
	}
	if started {
		fmt.Fprintf(a.stderr, "started the embedded database in %s\n", e.Dir)
	}
	// Only run says which database it uses (docs/embedded.md): above
	// every table it was noise. url holds the password: only its redacted
	// form is shown.
	if a.hostMigrates {
		fmt.Fprintf(a.stderr, "using the embedded database %s, password in %s (set database.url or STUDIO_DATABASE_URL to use another)\n",
			db.Redact(url), e.PasswordFile())
	}
	if !a.hostMigrates && a.cfg.Database.Migrate == "on" {
		if err := migrateEmbedded(ctx, url); err != nil {
			return "", err
		}
	}
	if a.embeddedSQLURL, err = e.SQLJobURL(); err != nil {
		return "", fmt.Errorf("embedded database: the sql jobs' login: %w", err)
	}
	return url, nil
}

// migrateEmbedded applies the migrations to the embedded default at url.
func migrateEmbedded(ctx context.Context, url string) error {
	pool, err := db.Open(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	_, err = migrate.Up(ctx, pool)
	return err
}

// connString resolves the database and opens it (openDatabase).
func (a *app) connString(ctx context.Context) (string, error) {
	return a.openDatabase(ctx, a.resolveDatabase())
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
	cfg, err := a.cliPoolConfig(cs)
	if err != nil {
		return nil, &usageError{err: err}
	}
	pool, err := db.OpenConfig(ctx, cfg, cs)
	if err != nil {
		return nil, err
	}
	a.pool = pool
	return pool, nil
}

// cliPoolConfig is an operator command's pool configuration for cs. Its
// statements run in one round trip each, with no prepared statement to
// lose (pgx's exec mode), so a command works through a pooler in
// transaction mode too; with database.listen_url set the pool keeps no
// session state at all (docs/poolers.md).
func (a *app) cliPoolConfig(cs string) (*pgxpool.Config, error) {
	cfg, err := db.ParsePoolConfig(cs)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = cliPoolMaxConns
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	// No SET on a server session a pooler shares with other clients.
	db.PinOnlyOwnSessions(cfg.ConnConfig)
	if l := a.cfg.Database.ListenURL; l != "" && l != cs {
		db.ForPoolerPool(cfg)
	}
	return cfg, nil
}

// sessionConnString resolves what needs a session of its own (LISTEN,
// the migrations' advisory lock): database.listen_url when set, else the
// database (docs/poolers.md).
func (a *app) sessionConnString(ctx context.Context) (string, error) {
	if l := a.cfg.Database.ListenURL; l != "" {
		return l, nil
	}
	return a.connString(ctx)
}

// sessionDB opens (once) a pool whose connections are sessions of their
// own: database.listen_url's, or the invocation's pool without one.
func (a *app) sessionDB(ctx context.Context) (*pgxpool.Pool, error) {
	l := a.cfg.Database.ListenURL
	if l == "" {
		return a.db(ctx)
	}
	if a.sessionPool != nil {
		return a.sessionPool, nil
	}
	cfg, err := db.ParsePoolConfig(l)
	if err != nil {
		return nil, &usageError{err: fmt.Errorf("database.listen_url (STUDIO_DATABASE_LISTEN_URL): %w", err)}
	}
	cfg.MaxConns = cliPoolMaxConns
	pool, err := db.OpenConfig(ctx, cfg, l)
	if err != nil {
		return nil, err
	}
	a.sessionPool = pool
	return pool, nil
}

// streams are a command's standard streams and whether stdin is a terminal
// (stdout's and stderr's are the printer's and the logger's business).
type streams struct {
	In       io.Reader
	Out, Err io.Writer
	InTTY    bool
}

// deps are what a command's run function depends on, held in its options
// struct so a test builds them itself (gh's cmdutil.Factory, kept small).
// The funcs are called only once the configuration is loaded.
type deps struct {
	IO *streams
	// DB opens (once) the database of this invocation.
	DB func(context.Context) (*pgxpool.Pool, error)
	// SessionDB opens (once) the database for what needs a session of
	// its own (LISTEN, migrations): database.listen_url's when set.
	SessionDB func(context.Context) (*pgxpool.Pool, error)
	// Printer prints to IO.Out in the format and colour chosen.
	Printer func() *output.Printer
	// Now is the display clock (STUDIO_NOW), never a decision's.
	Now func() time.Time
	// NowFixed says Now is fixed: ages and remaining times are then shown
	// from it too, so output is stable.
	NowFixed bool
	// Getenv is the injected environment, the only one read.
	Getenv func(string) string
	// Actor is who the audit row names.
	Actor func() string
	// LockTable is the configured lock table.
	LockTable func() locks.Table
}

// deps returns the dependencies every command takes from the app.
func (a *app) deps() deps {
	return deps{
		IO:        &streams{In: a.stdin, Out: a.stdout, Err: a.stderr, InTTY: a.stdinTTY},
		DB:        a.db,
		SessionDB: a.sessionDB,
		Printer:   a.printer,
		Now:       a.now,
		NowFixed:  a.nowFixed,
		Getenv:    a.getenv,
		Actor:     a.actor,
		LockTable: a.lockTable,
	}
}

// confirm asks on a terminal unless yes; without a terminal it does not ask.
func (s *streams) confirm(question string, yes bool) (bool, error) {
	if yes || !s.InTTY {
		return true, nil
	}
	fmt.Fprintf(s.Err, "%s [y/N] ", question)
	line, err := bufio.NewReader(s.In).ReadString('\n')
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
