// Package db opens connections to PostgreSQL the way every part of
// studioctl needs them: sessions in UTC, and errors that never show a
// password.
package db

import (
	"context"
	"errors"
	"fmt"
	"net/url"
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
}

func (e *ConnectError) Error() string { return e.msg }

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
}

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
	return &ConnectError{Target: target, msg: scrubString(msg, connString, cfg.Password)}
}

// Describe names a database without secrets: user@host:port/database.
func Describe(cfg *pgx.ConnConfig) string {
	return fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}

// Redact returns connString with its password replaced by "xxxxx". It
// handles URLs and keyword/value strings.
func Redact(connString string) string {
	if connString == "" {
		return ""
	}
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return "(unparseable url, hidden)"
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	// keyword/value: password=secret or password='se cret'
	var b strings.Builder
	for _, kv := range keywordPairs(connString) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		if kv[0] == "password" {
			b.WriteString("password=xxxxx")
			continue
		}
		b.WriteString(kv[0] + "=" + kv[2])
	}
	return b.String()
}

// keywordPairs splits a libpq keyword/value string into key, value and the
// value as written, honouring single quotes and backslash escapes.
func keywordPairs(s string) [][3]string {
	var out [][3]string
	i := 0
	for i < len(s) {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n') {
			i++
		}
		start := i
		for i < len(s) && s[i] != '=' && s[i] != ' ' {
			i++
		}
		key := strings.TrimSpace(s[start:i])
		for i < len(s) && s[i] == ' ' {
			i++
		}
		if i < len(s) && s[i] == '=' {
			i++
		}
		for i < len(s) && s[i] == ' ' {
			i++
		}
		vstart := i
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
			}
		} else {
			for i < len(s) && s[i] != ' ' {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
				i++
			}
		}
		if key != "" {
			out = append(out, [3]string{key, val.String(), s[vstart:i]})
		}
	}
	return out
}

// passwordOf extracts the password from a connection string, if any.
func passwordOf(connString string) string {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return ""
		}
		if p, ok := u.User.Password(); ok {
			return p
		}
		return u.Query().Get("password")
	}
	for _, kv := range keywordPairs(connString) {
		if kv[0] == "password" {
			return kv[1]
		}
	}
	return ""
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
	pw := passwordOf(connString)
	for _, s := range append([]string{pw, url.QueryEscape(pw), url.PathEscape(pw)}, extra...) {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "xxxxx")
		}
	}
	return msg
}

// Scrub is scrub for callers outside the package: it removes the password
// of connString from err's text.
func Scrub(err error, connString string) error { return scrub(err, connString) }

// sqlstateReadOnly is read_only_sql_transaction: a write on a hot standby,
// or under default_transaction_read_only=on.
const sqlstateReadOnly = "25006"

// ErrReadOnly marks an error from a database that refuses writes.
var ErrReadOnly = errors.New("the database is read-only (a standby or default_transaction_read_only=on)")

// IsReadOnly reports whether err is a server's refusal to write in a
// read-only transaction (SQLSTATE 25006).
func IsReadOnly(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlstateReadOnly
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
