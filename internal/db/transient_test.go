package db_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

func TestTransientErrorsAreTheOnesALaterTryMayNotGet(t *testing.T) {
	pgErr := func(code string) error {
		return fmt.Errorf("start runner: read job schedules: %w", &pgconn.PgError{Code: code})
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"an administrator's shutdown or pg_terminate_backend (57P01)", pgErr("57P01"), true},
		{"a crash shutdown (57P02)", pgErr("57P02"), true},
		{"a server starting up or shutting down (57P03)", pgErr("57P03"), true},
		{"a write on a standby (25006)", pgErr("25006"), true},
		{"a serialization failure (40001)", pgErr("40001"), true},
		{"a deadlock (40P01)", pgErr("40P01"), true},
		{"too many connections (53300)", pgErr("53300"), true},
		{"a connection exception (08006)", pgErr("08006"), true},
		{"a lost connection (unexpected EOF)", fmt.Errorf("register: %w", io.ErrUnexpectedEOF), true},
		{"anything else", errors.New("job \"x\": bad schedule"), false},
		{"a refused login (28P01)", pgErr("28P01"), false},
		{"a missing privilege (42501)", pgErr("42501"), false},
		{"a missing table (42P01)", pgErr("42P01"), false},
		{"a statement deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{"a cancelled start", fmt.Errorf("x: %w", context.Canceled), false},
		{"a closed connection", fmt.Errorf("x: %w", pgconn.ErrConnClosed), true},
		{"no error", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := db.IsTransient(tt.err); got != tt.want {
				t.Fatalf("IsTransient(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestAConnectErrorIsTransientWhenTheServerRefusesButNotWhenTheLoginIsWrong(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Nothing listens on a port just freed: connection refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = db.Open(ctx, "postgres://u:pw@"+addr+"/x?connect_timeout=5")
	if err == nil || !db.IsTransient(err) {
		t.Fatalf("connect to a closed port: %v, want a transient error", err)
	}
	// A wrong password is the configuration's: a retry gets it again.
	u, err := url.Parse(pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("no_such_role_here", "wrong")
	_, err = db.Open(ctx, u.String())
	if err == nil || db.IsTransient(err) {
		t.Fatalf("connect with a wrong login: %v, want an error that is not transient", err)
	}
}

// A statement whose answer was lost may have run; one that never left, or
// that the server refused, did not. A lock try's caller gives back a lock
// it may hold (runner.tryLock) on the first kind only.
func TestAnOutcomeIsUnknownOnlyWhenTheRequestMayHaveRunAndTheAnswerWasLost(t *testing.T) {
	pgErr := func(severity, code string) error {
		return fmt.Errorf("acquire lock: %w", &pgconn.PgError{Severity: severity, Code: code})
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"a lost connection while waiting (unexpected EOF)", fmt.Errorf("acquire lock: %w", io.ErrUnexpectedEOF), true},
		{"a statement deadline while waiting", fmt.Errorf("acquire lock: %w", context.DeadlineExceeded), true},
		{"the session ended by the server (FATAL 57P01), perhaps after its commit", pgErr("FATAL", "57P01"), true},
		{"a statement the server refused (ERROR 25006)", pgErr("ERROR", "25006"), false},
		{"a statement the server cancelled (ERROR 57014)", pgErr("ERROR", "57014"), false},
		{"a connection that could not be made", &db.ConnectError{Target: "postgres://h/db"}, false},
		{"an error before anything was sent", fmt.Errorf("x: %w", safeToRetry{}), false},
		{"no error", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := db.OutcomeUnknown(tt.err); got != tt.want {
				t.Fatalf("OutcomeUnknown(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// safeToRetry is an error pgx marks as sent nothing (pgconn.SafeToRetry).
type safeToRetry struct{}

func (safeToRetry) Error() string     { return "conn busy" }
func (safeToRetry) SafeToRetry() bool { return true }
