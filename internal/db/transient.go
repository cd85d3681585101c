package db

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// transientSQLStates are the server's answers that a later try may not
// get: the server shutting down or restarting (57P01 admin_shutdown,
// 57P02 crash_shutdown, 57P03 cannot_connect_now: starting up or shutting
// down), too many connections (53300), a read-only server (25006, a
// standby or a fenced primary: a failover's gap), a serialization failure
// or a deadlock (40001, 40P01). Class 08 (connection exceptions) counts
// too.
var transientSQLStates = map[string]bool{
	"57P01": true, "57P02": true, "57P03": true,
	"53300":          true,
	sqlstateReadOnly: true,
	"40001":          true, "40P01": true,
}

// IsTransient reports whether err is one that a later try may not get
// (a replica's start waits these out, docs/failover.md): the connection
// lost, refused, reset or timed out, the server shutting down, restarting
// or starting up, too many connections, a server that refuses writes, a
// serialization failure or a deadlock. A cancelled context, a refused
// login, a missing database or privilege, and anything else are not.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var ce *ConnectError
	if errors.As(err, &ce) {
		return ce.transient
	}
	return transientCause(err)
}

// transientCause is IsTransient on the driver's own error.
func transientCause(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if IsReadOnly(err) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return transientSQLStates[pgErr.Code] || strings.HasPrefix(pgErr.Code, "08")
	}
	if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) || errors.Is(err, pgconn.ErrConnClosed) {
		return true
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ETIMEDOUT) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) {
		return true
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		var dnsErr *net.DNSError
		return !errors.As(err, &dnsErr) // a name that does not resolve is the configuration's
	}
	return pgconn.SafeToRetry(err)
}

// OutcomeUnknown reports whether a statement that failed with err may have
// run all the same: its request may have reached the server and the answer
// was lost (the connection closed, reset or timed out while it waited, or
// the server ended the session: a FATAL can come after a commit, as when a
// synchronous standby's wait is cut short). A failure to connect, an error
// before anything was sent, and an error the server answered for the
// statement (severity ERROR: it did not run) are known failures.
func OutcomeUnknown(err error) bool {
	if err == nil {
		return false
	}
	var ce *ConnectError
	var pce *pgconn.ConnectError
	if errors.As(err, &ce) || errors.As(err, &pce) || pgconn.SafeToRetry(err) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Severity == "FATAL" || pgErr.Severity == "PANIC"
	}
	return true
}
