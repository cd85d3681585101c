// Package db opens connections to PostgreSQL the way every part of
// studioctl needs them: sessions in UTC, and errors that never show a
// password.
package db

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ConnectTimeout bounds a connection attempt when the connection string does
// not set connect_timeout itself.
const ConnectTimeout = 10 * time.Second

// ApplicationName is reported to the server as application_name.
const ApplicationName = "studioctl"

// ConnectError is a failure to reach or log in to the database. Its text
// never holds a password.
type ConnectError struct {
	Target string // the redacted connection string
	msg    string
	// readOnly: every server reached was refused by
	// target_session_attrs=read-write (or primary) for being read-only.
	readOnly bool
	// transient: a later try may connect (IsTransient): the server
	// refused or reset the connection, is starting up or shutting down,
	// or timed out.
	transient bool
}

func (e *ConnectError) Error() string { return e.msg }

// Unwrap gives ErrReadOnly when target_session_attrs refused every server
// for being read-only, so IsReadOnly and errors.Is see it; nothing else
// (the driver's error is not kept, so its text can never leak).
func (e *ConnectError) Unwrap() error {
	if e.readOnly {
		return ErrReadOnly
	}
	return nil
}

// ParsePoolConfig parses a PostgreSQL URL or keyword/value string (an empty
// string means the standard PG* environment variables) and makes every
// session use TimeZone=UTC.
func ParsePoolConfig(connString string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, scrub(fmt.Errorf("parse database url: %w", err), connString)
	}
	setSessionDefaults(cfg.ConnConfig)
	return cfg, nil
}

// ParseConnConfig is ParsePoolConfig for a single connection.
func ParseConnConfig(connString string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, scrub(fmt.Errorf("parse database url: %w", err), connString)
	}
	setSessionDefaults(cfg)
	return cfg, nil
}

func setSessionDefaults(cfg *pgx.ConnConfig) {
	// Any spelling of the parameter (TimeZone=...) would be sent beside ours
	// in random order: drop it.
	for k := range cfg.RuntimeParams {
		if strings.EqualFold(k, "timezone") {
			delete(cfg.RuntimeParams, k)
		}
	}
	cfg.RuntimeParams["timezone"] = "UTC"
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = ApplicationName
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = ConnectTimeout
	}
	// A sql job runs as the replica's role and could poison every later
	// connection with ALTER ROLE CURRENT_USER SET statement_timeout = '1ms'
	// (found by the adversarial pass over issue 7): the replica's sessions
	// pin the settings its deadlines rely on. Deadlines come from contexts,
	// never from the server. (default_transaction_read_only is left alone:
	// a read-only database must still say so.)
	next := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, c *pgconn.PgConn) error {
		if err := pin(ctx, c); err != nil {
			return err
		}
		if next != nil {
			return next(ctx, c)
		}
		return nil
	}
}

// pin sets pinnedSettings on c. The SET itself runs under a poisoned
// timeout: a 1 ms statement_timeout can cancel it on a loaded server, and
// then none of it took effect. A few tries make that vanishingly rare.
func pin(ctx context.Context, c *pgconn.PgConn) error {
	var err error
	for range pinTries {
		if err = c.Exec(ctx, pinnedSettings).Close(); err == nil || !isTimeoutCancel(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("set session defaults: %w", err)
	}
	return nil
}

// PinOnlyOwnSessions makes cfg pin the session settings only on a session
// of its own: one whose backend pid is the one the server announced at
// connect. Behind a pooler (PgBouncer announces keys of its own) a SET
// would stay on a server session that the pooler hands to other clients
// next, other applications' among them, so it is left out there; a
// poisoned role setting then fails the command visibly instead. For the
// operator's commands, which may go through any pooler (docs/poolers.md).
// Call it right after ParsePoolConfig or ParseConnConfig.
func PinOnlyOwnSessions(cfg *pgx.ConnConfig) {
	cfg.AfterConnect = func(ctx context.Context, c *pgconn.PgConn) error {
		own, err := ownSession(ctx, c)
		if err != nil || !own {
			return err
		}
		return pin(ctx, c)
	}
}

// ownSession reports whether c's backend is the one the server announced
// (BackendKeyData) when c connected: no pooler or proxy in between.
func ownSession(ctx context.Context, c *pgconn.PgConn) (bool, error) {
	var (
		rs  []*pgconn.Result
		err error
	)
	for range pinTries {
		if rs, err = c.Exec(ctx, `SELECT pg_backend_pid()`).ReadAll(); err == nil || !isTimeoutCancel(err) {
			break
		}
	}
	if err != nil {
		return false, fmt.Errorf("set session defaults: %w", err)
	}
	if len(rs) != 1 || len(rs[0].Rows) != 1 || len(rs[0].Rows[0]) != 1 {
		return false, errors.New("set session defaults: pg_backend_pid() returned no row")
	}
	pid, err := strconv.ParseUint(string(rs[0].Rows[0][0]), 10, 32)
	if err != nil {
		return false, fmt.Errorf("set session defaults: pg_backend_pid(): %w", err)
	}
	return uint32(pid) == c.PID(), nil
}

// pinTries bounds the tries of pinnedSettings on one new connection.
const pinTries = 5

// isTimeoutCancel reports a statement cancelled by statement_timeout
// (57014) or lock_timeout (55P03).
func isTimeoutCancel(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "57014" || pgErr.Code == "55P03")
}

// pinnedSettings are set on every connection studioctl opens, whatever the
// role or database defaults say.
const pinnedSettings = `SET statement_timeout = 0; SET lock_timeout = 0; SET idle_in_transaction_session_timeout = 0`

// Open opens a pool and checks that the database answers.
func Open(ctx context.Context, connString string) (*pgxpool.Pool, error) {
	cfg, err := ParsePoolConfig(connString)
	if err != nil {
		return nil, err
	}
	return OpenConfig(ctx, cfg, connString)
}

// OpenConfig opens a pool from a parsed configuration and pings it.
// connString is used only to scrub secrets from errors.
func OpenConfig(ctx context.Context, cfg *pgxpool.Config, connString string) (*pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, connectError(err, cfg.ConnConfig, connString)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, connectError(err, cfg.ConnConfig, connString)
	}
	return pool, nil
}

// Connect opens one connection (for dedicated listener or heartbeat
// connections) with the same session defaults.
func Connect(ctx context.Context, cfg *pgx.ConnConfig, connString string) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, connectError(err, cfg, connString)
	}
	return conn, nil
}

func connectError(err error, cfg *pgx.ConnConfig, connString string) error {
	target := Describe(cfg)
	msg := fmt.Sprintf("connect to database %s: %v", target, err)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "3D000" {
		msg += " (create it, or run `studioctl migrate up` against an existing database)"
	}
	if isAfterConnectTimeout(err) {
		msg += " (the server accepted the connection but did not answer its first statement in time: a connection pooler with no " +
			"free server connection, such as PgBouncer in session mode with every one of its default_pool_size connections held " +
			"by other clients, or an overloaded server; docs/poolers.md)"
	}
	readOnly := errors.Is(err, pgconn.ErrReadOnlyConnection) || errors.Is(err, pgconn.ErrStandbyConnection)
	if readOnly {
		msg += " (" + ErrReadOnly.Error() + ": target_session_attrs found no server that accepts writes)"
	}
	return &ConnectError{Target: target, msg: scrubString(msg, connString, cfg.Password), readOnly: readOnly,
		transient: readOnly || transientCause(err)}
}

// isAfterConnectTimeout: the connection was made, and its first
// statement (the session defaults) timed out.
func isAfterConnectTimeout(err error) bool {
	return strings.Contains(err.Error(), "AfterConnect") && (errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err))
}

// Describe names a database without secrets: user@host:port/database, with
// every host of a multi-host URL (user@h1:p1,h2:p2/database).
func Describe(cfg *pgx.ConnConfig) string {
	hosts := []string{fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)}
	for _, f := range cfg.Fallbacks {
		// sslmode=prefer lists each host twice (TLS, then plain).
		if h := fmt.Sprintf("%s:%d", f.Host, f.Port); h != hosts[len(hosts)-1] {
			hosts = append(hosts, h)
		}
	}
	return fmt.Sprintf("%s@%s/%s", cfg.User, strings.Join(hosts, ","), cfg.Database)
}

// redacted replaces every secret Redact hides.
const redacted = "xxxxx"

// Redact returns connString with every password replaced by "xxxxx", in
// any spelling libpq or pgx would accept, and some they would not: a URL
// with any scheme in any case (POSTGRES://), surrounding whitespace, a
// password in the user info (raw or percent-encoded, one host or several)
// or in the query (?password=, ?sslpassword=, any key case, a
// percent-encoded key), a URL that does not parse; a keyword/value string
// with any keyword case (PASSWORD=), spaces around "=", quoted values with
// \' escapes, an unterminated quote (its own, or another keyword's that
// swallows a password: host='db password=x); a mistyped URL that pgx refuses
// ("postgres:/user:pw@host", "postgres//user:pw@host", "user:pw@host").
// The rest of the text is kept as written.
func Redact(connString string) string {
	if connString == "" {
		return ""
	}
	s := strings.TrimSpace(connString)
	if rest, ok := afterScheme(s); ok {
		return s[:len(s)-len(rest)] + redactURLRest(rest)
	}
	kws := scanKeywords(s)
	if len(kws) > 0 && strings.ContainsAny(kws[0].key, ":/@") {
		// Not a keyword/value string but a mistyped URL
		// ("postgres:/app:pw@db", "postgres//app:pw@db", "app:pw@db"):
		// pgx refuses it, and hides its password in the error. So do we.
		rest := trimSchemeTypo(s)
		return s[:len(s)-len(rest)] + redactURLRest(rest)
	}
	var b strings.Builder
	last := 0
	for _, kv := range kws {
		// An unterminated quote swallows the rest of the string, any
		// password=... in it included (host='db password=secret): hide
		// the rest too.
		if isSecretKey(kv.key) || kv.open && strings.Contains(strings.ToLower(kv.value), "password") {
			b.WriteString(s[last:kv.vstart])
			b.WriteString(redacted)
			last = kv.vend
		}
	}
	b.WriteString(s[last:])
	return b.String()
}

// isSecretKey: password, sslpassword, in any case.
func isSecretKey(key string) bool {
	return strings.HasSuffix(strings.ToLower(strings.TrimSpace(key)), "password")
}

// trimSchemeTypo returns s without a leading "postgres" or "postgresql" (any
// case) and without the ':' and '/' that follow it or start s.
func trimSchemeTypo(s string) string {
	rest := s
	for _, p := range []string{"postgresql", "postgres"} {
		if len(rest) >= len(p) && strings.EqualFold(rest[:len(p)], p) {
			rest = rest[len(p):]
			break
		}
	}
	return strings.TrimLeft(rest, ":/")
}

// afterScheme returns what follows "scheme://" when s starts with a URL
// scheme (letters, digits, "+", "-", "." after a first letter; any case).
func afterScheme(s string) (string, bool) {
	i := strings.Index(s, "://")
	if i <= 0 {
		return "", false
	}
	for k, c := range s[:i] {
		letter := (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		if !letter && (k == 0 || !((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.')) {
			return "", false
		}
	}
	return s[i+3:], true
}

// userInfoEnd finds the "@" that ends the user info of a URL's rest (after
// "scheme://"), or -1. The user info runs to the last "@" before the first
// "/", "?" or "#" that follows its first "@", so a password holding a raw
// "@", "/", "?" or "#" is still covered (libpq stops at the first "@",
// net/url at the last: hiding up to the last hides both).
func userInfoEnd(rest string) int {
	first := strings.IndexByte(rest, '@')
	if first < 0 {
		return -1
	}
	end := len(rest)
	if k := strings.IndexAny(rest[first:], "/?#"); k >= 0 {
		end = first + k
	}
	at := strings.LastIndexByte(rest[:end], '@')
	// A "/" in the user name means this "@" is in the path, and there is
	// no user info. pgx reads a "?" or "#" before the "@" as part of the
	// user ("postgres://#:pw@host" has user "#" and password "pw"), so
	// they do not end it.
	user, _, _ := strings.Cut(rest[:at], ":")
	if strings.Contains(user, "/") {
		return -1
	}
	return at
}

func redactURLRest(rest string) string {
	var b strings.Builder
	if at := userInfoEnd(rest); at >= 0 {
		if user, _, hasPw := strings.Cut(rest[:at], ":"); hasPw {
			b.WriteString(user + ":" + redacted)
		} else {
			b.WriteString(rest[:at])
		}
		rest = rest[at:]
	}
	q := strings.IndexByte(rest, '?')
	if q < 0 {
		b.WriteString(rest)
		return b.String()
	}
	b.WriteString(rest[:q+1])
	query, frag, hasFrag := strings.Cut(rest[q+1:], "#")
	params := strings.Split(query, "&")
	for i, p := range params {
		k, _, hasVal := strings.Cut(p, "=")
		key, err := url.QueryUnescape(k)
		if err != nil {
			key = k
		}
		if hasVal && isSecretKey(key) {
			params[i] = k + "=" + redacted
		}
	}
	b.WriteString(strings.Join(params, "&"))
	if hasFrag {
		b.WriteString("#" + frag)
	}
	return b.String()
}

// keyword is one key=value of a libpq keyword/value string: the key, the
// value unquoted and unescaped, and the span of the value as written.
type keyword struct {
	key, value   string
	vstart, vend int
	// open: the value starts with a quote that is never closed, so it
	// runs to the end of the string.
	open bool
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// scanKeywords splits a keyword/value string as libpq does: spaces around
// "=", single-quoted values with backslash escapes, unquoted values ending
// at white space (backslash escapes too). An unterminated quote runs to the
// end. A key without "=" takes the next word as its value, so a mistyped
// "password secret" still counts as a password.
func scanKeywords(s string) []keyword {
	var out []keyword
	i := 0
	skip := func() {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
	}
	for {
		skip()
		if i >= len(s) {
			return out
		}
		start := i
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		key := s[start:i]
		skip()
		if i < len(s) && s[i] == '=' {
			i++
		}
		skip()
		kv := keyword{key: key, vstart: i}
		var val strings.Builder
		if i < len(s) && s[i] == '\'' {
			i++
			for i < len(s) && s[i] != '\'' {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
				i++
			}
			if i < len(s) {
				i++ // closing quote
			} else {
				kv.open = true
			}
		} else {
			for i < len(s) && !isSpace(s[i]) {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
				i++
			}
		}
		kv.value, kv.vend = val.String(), i
		if key != "" {
			out = append(out, kv)
		}
	}
}

// scrubbedError keeps the wrapped chain for errors.As but prints a text
// from which every secret has been removed.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// scrub removes every password of connString (and extra secrets) from err's text.
func scrub(err error, connString string, extra ...string) error {
	if err == nil {
		return nil
	}
	msg := scrubString(err.Error(), connString, extra...)
	if msg == err.Error() {
		return err
	}
	return &scrubbedError{msg: msg, err: err}
}

func scrubString(msg, connString string, extra ...string) string {
	// The connection string itself, wherever the text quotes it.
	if t := strings.TrimSpace(connString); t != "" {
		msg = strings.ReplaceAll(msg, t, Redact(t))
	}
	forms := extra
	for _, pw := range secretsOf(connString) {
		forms = append(forms, pw, url.QueryEscape(pw), url.PathEscape(pw))
	}
	// Longest first, so that a secret inside another is not left half shown.
	sort.Slice(forms, func(i, j int) bool { return len(forms[i]) > len(forms[j]) })
	for _, f := range forms {
		if f != "" {
			msg = strings.ReplaceAll(msg, f, redacted)
		}
	}
	return msg
}

// secretsOf lists every secret of connString, each as decoded and as
// written: the URL's user-info password and every password or sslpassword
// query value (pgx uses the query's when both are given), or every secret
// keyword of a keyword/value string.
func secretsOf(connString string) []string {
	s := strings.TrimSpace(connString)
	var out []string
	add := func(raw string, decode func(string) (string, error)) {
		if raw == "" {
			return
		}
		out = append(out, raw)
		if dec, err := decode(raw); err == nil && dec != raw {
			out = append(out, dec)
		}
	}
	if rest, ok := afterScheme(s); ok {
		if at := userInfoEnd(rest); at >= 0 {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
				add(pw, url.PathUnescape)
			}
			rest = rest[at:]
		}
		if _, query, ok := strings.Cut(rest, "?"); ok {
			query, _, _ = strings.Cut(query, "#")
			for _, p := range strings.Split(query, "&") {
				k, v, _ := strings.Cut(p, "=")
				key, err := url.QueryUnescape(k)
				if err != nil {
					key = k
				}
				if isSecretKey(key) {
					add(v, url.QueryUnescape)
				}
			}
		}
		return out
	}
	for _, kv := range scanKeywords(s) {
		if isSecretKey(kv.key) {
			out = append(out, kv.value, s[kv.vstart:kv.vend])
		}
	}
	return out
}

// Secrets lists the passwords of connString (a URL's user info password,
// password and sslpassword values in a query or keyword string), each as
// decoded and as written.
func Secrets(connString string) []string { return secretsOf(connString) }

// Scrub is scrub for callers outside the package: it removes the password
// of connString from err's text.
func Scrub(err error, connString string) error { return scrub(err, connString) }

// sqlstateReadOnly is read_only_sql_transaction: a write on a hot standby,
// or under default_transaction_read_only=on.
const sqlstateReadOnly = "25006"

// ErrReadOnly marks an error from a database that refuses writes.
var ErrReadOnly = errors.New("the database is read-only (a standby or default_transaction_read_only=on)")

// IsReadOnly reports whether err is a server's refusal to write in a
// read-only transaction (SQLSTATE 25006), or a connection refused by
// target_session_attrs=read-write because every server reached is
// read-only (a standby, or default_transaction_read_only=on).
func IsReadOnly(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == sqlstateReadOnly {
		return true
	}
	return errors.Is(err, ErrReadOnly) || errors.Is(err, pgconn.ErrReadOnlyConnection) || errors.Is(err, pgconn.ErrStandbyConnection)
}

// readOnlySQL is true when a new transaction of this session would be
// read-only: the server is a standby, or default_transaction_read_only is
// on (for the database, the role or the whole server).
const readOnlySQL = `SELECT current_setting('transaction_read_only') = 'on'`

// Querier is the part of a pool or connection ReadOnly needs.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ReadOnly reports whether the server q reaches refuses writes now.
func ReadOnly(ctx context.Context, q Querier) (bool, error) {
	var ro bool
	if err := q.QueryRow(ctx, readOnlySQL).Scan(&ro); err != nil {
		return false, err
	}
	return ro, nil
}

// readOnlyError says the database is read-only before the server's own
// text; errors.Is finds both ErrReadOnly and the original chain.
type readOnlyError struct{ err error }

func (e *readOnlyError) Error() string   { return ErrReadOnly.Error() + ": " + e.err.Error() }
func (e *readOnlyError) Unwrap() []error { return []error{ErrReadOnly, e.err} }

// ExplainReadOnly wraps a read-only refusal so its text says what is wrong
// ("the database is read-only (a standby or ...): ..."); any other error,
// and one already explained, comes back as it is.
func ExplainReadOnly(err error) error {
	if err == nil || !IsReadOnly(err) || errors.Is(err, ErrReadOnly) {
		return err
	}
	return &readOnlyError{err: err}
}

// sqlstatePermission is insufficient_privilege: the role may not do what
// the statement asks (docs/roles.md lists what each command needs).
const sqlstatePermission = "42501"

// ErrPermission marks a server's refusal for want of a privilege.
var ErrPermission = errors.New("the database role lacks a privilege this command needs (see docs/roles.md)")

// IsPermissionDenied reports whether err is a server's refusal for want of
// a privilege (SQLSTATE 42501).
func IsPermissionDenied(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlstatePermission
}

// permissionError says a privilege is missing before the server's own text.
type permissionError struct{ err error }

func (e *permissionError) Error() string   { return ErrPermission.Error() + ": " + e.err.Error() }
func (e *permissionError) Unwrap() []error { return []error{ErrPermission, e.err} }

// ExplainPermission wraps a refusal for want of a privilege so its text says
// so and where the roles are documented; any other error, and one already
// explained, comes back as it is.
func ExplainPermission(err error) error {
	if err == nil || !IsPermissionDenied(err) || errors.Is(err, ErrPermission) {
		return err
	}
	return &permissionError{err: err}
}
