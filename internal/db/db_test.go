package db_test

import (
	"context"
	"errors"
	"fmt"
	neturl "net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const secret = "s3cr3t-Pa55"

func TestParseConfigSetsSessionDefaults(t *testing.T) {
	tests := []struct {
		name        string
		connString  string
		wantAppName string
		wantTimeout time.Duration
	}{
		{
			name:        "a URL gets UTC, the default application name and the default timeout",
			connString:  "postgres://app:" + secret + "@127.0.0.1:5432/app",
			wantAppName: db.ApplicationName,
			wantTimeout: db.ConnectTimeout,
		},
		{
			name:        "a keyword/value string gets UTC, the default application name and the default timeout",
			connString:  "host=127.0.0.1 port=5432 user=app password=" + secret + " dbname=app",
			wantAppName: db.ApplicationName,
			wantTimeout: db.ConnectTimeout,
		},
		{
			name:        "a URL that names its own application keeps that name",
			connString:  "postgres://app@127.0.0.1/app?application_name=custom",
			wantAppName: "custom",
			wantTimeout: db.ConnectTimeout,
		},
		{
			name:        "a URL that sets its own connect_timeout keeps it",
			connString:  "postgres://app@127.0.0.1/app?connect_timeout=3",
			wantAppName: db.ApplicationName,
			wantTimeout: 3 * time.Second,
		},
		{
			name:        "a URL that asks for another time zone is still put in UTC",
			connString:  "postgres://app@127.0.0.1/app?timezone=America/New_York",
			wantAppName: db.ApplicationName,
			wantTimeout: db.ConnectTimeout,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pc, err := db.ParsePoolConfig(tt.connString)
			if err != nil {
				t.Fatalf("ParsePoolConfig: %v", err)
			}
			cc, err := db.ParseConnConfig(tt.connString)
			if err != nil {
				t.Fatalf("ParseConnConfig: %v", err)
			}
			for which, cfg := range map[string]*pgx.ConnConfig{"pool": pc.ConnConfig, "conn": cc} {
				if got := cfg.RuntimeParams["timezone"]; got != "UTC" {
					t.Errorf("%s: timezone = %q, want UTC", which, got)
				}
				if got := cfg.RuntimeParams["application_name"]; got != tt.wantAppName {
					t.Errorf("%s: application_name = %q, want %q", which, got, tt.wantAppName)
				}
				if cfg.ConnectTimeout != tt.wantTimeout {
					t.Errorf("%s: ConnectTimeout = %v, want %v", which, cfg.ConnectTimeout, tt.wantTimeout)
				}
			}
		})
	}
}

func TestParseErrorsNeverShowThePassword(t *testing.T) {
	tests := []struct {
		name       string
		connString string
	}{
		{"a URL with a bad port", "postgres://app:" + secret + "@127.0.0.1:notaport/app"},
		{"a URL with a bad connect_timeout", "postgres://app:" + secret + "@127.0.0.1/app?connect_timeout=soon"},
		{"a keyword/value string with a bad port", "host=127.0.0.1 port=notaport user=app password=" + secret},
		{"a keyword/value string with a bad sslmode", "host=127.0.0.1 user=app password=" + secret + " sslmode=sometimes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := db.ParsePoolConfig(tt.connString)
			if err == nil {
				t.Fatal("ParsePoolConfig: want an error")
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("ParsePoolConfig error shows the password: %v", err)
			}
			_, err = db.ParseConnConfig(tt.connString)
			if err == nil {
				t.Fatal("ParseConnConfig: want an error")
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("ParseConnConfig error shows the password: %v", err)
			}
		})
	}
}

func TestConnectErrorsNeverShowThePassword(t *testing.T) {
	tests := []struct {
		name       string
		connString string
	}{
		{"a refused URL", "postgres://app:" + secret + "@127.0.0.1:1/app?connect_timeout=2"},
		{"a refused keyword/value string", "host=127.0.0.1 port=1 user=app password=" + secret + " dbname=app connect_timeout=2"},
		{"a refused URL with the password in the query", "postgres://app@127.0.0.1:1/app?connect_timeout=2&password=" + secret},
	}
	const wantTarget = "app@127.0.0.1:1/app"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			check := func(what string, err error) {
				t.Helper()
				if err == nil {
					t.Fatalf("%s: want an error connecting to port 1", what)
				}
				var ce *db.ConnectError
				if !errors.As(err, &ce) {
					t.Fatalf("%s: error is %T, want *db.ConnectError: %v", what, err, err)
				}
				if ce.Target != wantTarget {
					t.Errorf("%s: Target = %q, want %q", what, ce.Target, wantTarget)
				}
				if strings.Contains(err.Error(), secret) {
					t.Errorf("%s: error shows the password: %v", what, err)
				}
				if !strings.Contains(err.Error(), wantTarget) {
					t.Errorf("%s: error does not name the target %q: %v", what, wantTarget, err)
				}
			}

			pool, err := db.Open(ctx, tt.connString)
			if pool != nil {
				pool.Close()
			}
			check("Open", err)

			pc, err := db.ParsePoolConfig(tt.connString)
			if err != nil {
				t.Fatal(err)
			}
			pool, err = db.OpenConfig(ctx, pc, tt.connString)
			if pool != nil {
				pool.Close()
			}
			check("OpenConfig", err)

			cc, err := db.ParseConnConfig(tt.connString)
			if err != nil {
				t.Fatal(err)
			}
			conn, err := db.Connect(ctx, cc, tt.connString)
			if conn != nil {
				conn.Close(ctx)
			}
			check("Connect", err)
		})
	}
}

func TestRedactHidesThePassword(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"an empty string stays empty", "", ""},
		{"a URL without a password is unchanged", "postgres://app@db.example:5432/app", "postgres://app@db.example:5432/app"},
		{"a URL password is replaced", "postgres://app:" + secret + "@db.example:5432/app", "postgres://app:xxxxx@db.example:5432/app"},
		{"a postgresql:// URL password is replaced", "postgresql://app:" + secret + "@db.example/app", "postgresql://app:xxxxx@db.example/app"},
		{"a password in the URL query is replaced", "postgres://app@db.example/app?password=" + secret, "postgres://app@db.example/app?password=xxxxx"},
		{"a keyword/value password is replaced", "host=db.example user=app password=" + secret + " dbname=app", "host=db.example user=app password=xxxxx dbname=app"},
		{"a keyword/value string without a password is unchanged", "host=db.example user=app dbname=app", "host=db.example user=app dbname=app"},
		{"a URL that does not parse still has its password replaced", "postgres://app:" + secret + "@db.example:port%zz/app", "postgres://app:xxxxx@db.example:port%zz/app"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := db.Redact(tt.in)
			if got != tt.want {
				t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if strings.Contains(got, secret) {
				t.Errorf("Redact(%q) still shows the password: %q", tt.in, got)
			}
		})
	}
}

func TestScrubRemovesThePassword(t *testing.T) {
	const escaped = "p@ss/w0rd?"
	tests := []struct {
		name       string
		err        error
		connString string
		hidden     []string
		want       string
	}{
		{
			name:       "a nil error stays nil",
			err:        nil,
			connString: "postgres://app:" + secret + "@h/app",
		},
		{
			name:       "a URL password is removed from the text",
			err:        errors.New("failed with " + secret + " inside"),
			connString: "postgres://app:" + secret + "@h/app",
			hidden:     []string{secret},
			want:       "failed with xxxxx inside",
		},
		{
			name:       "a keyword/value password is removed from the text",
			err:        errors.New("failed with " + secret),
			connString: "host=h user=app password=" + secret,
			hidden:     []string{secret},
			want:       "failed with xxxxx",
		},
		{
			name:       "a percent-encoded password is removed in both spellings",
			err:        errors.New("raw " + escaped + " encoded p%40ss%2Fw0rd%3F"),
			connString: "postgres://app:p%40ss%2Fw0rd%3F@h/app",
			hidden:     []string{escaped, "p%40ss%2Fw0rd%3F"},
			want:       "raw xxxxx encoded xxxxx",
		},
		{
			name:       "an error without the password is returned unchanged",
			err:        errors.New("nothing secret here"),
			connString: "postgres://app:" + secret + "@h/app",
			want:       "nothing secret here",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := db.Scrub(tt.err, tt.connString)
			if tt.err == nil {
				if got != nil {
					t.Fatalf("Scrub(nil) = %v, want nil", got)
				}
				return
			}
			if got.Error() != tt.want {
				t.Errorf("Scrub text = %q, want %q", got.Error(), tt.want)
			}
			for _, h := range tt.hidden {
				if strings.Contains(got.Error(), h) {
					t.Errorf("Scrub text still holds %q: %q", h, got.Error())
				}
			}
			if !errors.Is(got, tt.err) {
				t.Errorf("Scrub result does not wrap the original error")
			}
		})
	}
}

func TestScrubKeepsTheErrorChain(t *testing.T) {
	var pgErr *pgxTestErr
	wrapped := &pgxTestErr{msg: "auth failed for " + secret}
	got := db.Scrub(wrapped, "postgres://app:"+secret+"@h/app")
	if !errors.As(got, &pgErr) {
		t.Fatalf("errors.As through Scrub failed: %T", got)
	}
	if strings.Contains(got.Error(), secret) {
		t.Errorf("Scrub text still holds the password: %q", got)
	}
}

type pgxTestErr struct{ msg string }

func (e *pgxTestErr) Error() string { return e.msg }

func TestSessionsRunInUTCOnARealServer(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The server default is deliberately not UTC.
	raw, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close(ctx)
	var serverTZ string
	if err := raw.QueryRow(ctx, "SHOW timezone").Scan(&serverTZ); err != nil {
		t.Fatal(err)
	}
	if serverTZ != pgtest.TimeZone {
		t.Fatalf("server default time zone = %q, want %q (the harness must not default to UTC)", serverTZ, pgtest.TimeZone)
	}

	tests := []struct {
		name    string
		open    func(t *testing.T) queryer
		wantApp string
	}{
		{
			name: "a pool from Open runs in UTC as studioctl",
			open: func(t *testing.T) queryer {
				p, err := db.Open(ctx, url)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(p.Close)
				return p
			},
			wantApp: db.ApplicationName,
		},
		{
			name: "a connection from Connect runs in UTC as studioctl",
			open: func(t *testing.T) queryer {
				cfg, err := db.ParseConnConfig(url)
				if err != nil {
					t.Fatal(err)
				}
				c, err := db.Connect(ctx, cfg, url)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close(context.Background()) })
				return c
			},
			wantApp: db.ApplicationName,
		},
		{
			name: "a pool whose URL asks for another time zone still runs in UTC",
			open: func(t *testing.T) queryer {
				p, err := db.Open(ctx, withQuery(url, "timezone=America/New_York&application_name=custom"))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(p.Close)
				return p
			},
			wantApp: "custom",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := tt.open(t)
			var tz, app string
			if err := q.QueryRow(ctx, "SELECT current_setting('TimeZone'), current_setting('application_name')").Scan(&tz, &app); err != nil {
				t.Fatal(err)
			}
			if tz != "UTC" {
				t.Errorf("SHOW timezone = %q, want UTC", tz)
			}
			if app != tt.wantApp {
				t.Errorf("application_name = %q, want %q", app, tt.wantApp)
			}
		})
	}
}

type queryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func withQuery(url, q string) string {
	if strings.Contains(url, "?") {
		return url + "&" + q
	}
	return url + "?" + q
}

func TestConnectingToAMissingDatabaseSaysHowToFixIt(t *testing.T) {
	url := pgtest.NewDB(t)
	i := strings.LastIndex(url, "/")
	rest := url[i+1:]
	query := ""
	if j := strings.Index(rest, "?"); j >= 0 {
		query = rest[j:]
	}
	missing := url[:i+1] + "no_such_database_xyz" + query
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := db.Open(ctx, missing)
	if p != nil {
		p.Close()
	}
	var ce *db.ConnectError
	if !errors.As(err, &ce) {
		t.Fatalf("Open = %v (%T), want *db.ConnectError", err, err)
	}
	if !strings.Contains(err.Error(), "studioctl migrate up") {
		t.Errorf("error does not say how to fix it: %v", err)
	}
}

func TestAQuotedPasswordIsHiddenWhole(t *testing.T) {
	conn := `host=h user=app password='se cr\'et' dbname=app`
	got := db.Redact(conn)
	if got != "host=h user=app password=xxxxx dbname=app" {
		t.Errorf("Redact(%q) = %q", conn, got)
	}
	err := db.Scrub(errors.New("x se cr'et y"), conn)
	if strings.Contains(err.Error(), "cr'et") || strings.Contains(err.Error(), "se ") {
		t.Errorf("Scrub left part of the password: %q", err)
	}
}

func TestAMixedCaseTimeZoneParameterIsReplacedByUTC(t *testing.T) {
	cfg, err := db.ParseConnConfig("postgres://u@h/d?TimeZone=America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range cfg.RuntimeParams {
		if strings.EqualFold(k, "timezone") && (k != "timezone" || v != "UTC") {
			t.Errorf("runtime param %s=%s, want only timezone=UTC", k, v)
		}
	}
}

// Found by the adversarial pass over issue 7: a sql job that ran
// ALTER ROLE CURRENT_USER SET statement_timeout = '1ms' made every later
// connection of the replica fail its lock and history statements. Every
// connection studioctl opens pins the timeouts its deadlines rely on.
func TestRoleDefaultsCannotPoisonNewConnections(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDB(t)
	admin, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	role := fmt.Sprintf("poison_%d", time.Now().UnixNano())
	for _, sql := range []string{
		`CREATE ROLE ` + role + ` LOGIN`,
		`ALTER ROLE ` + role + ` SET statement_timeout = '1ms'`,
		`ALTER ROLE ` + role + ` SET lock_timeout = '1ms'`,
		`ALTER ROLE ` + role + ` SET idle_in_transaction_session_timeout = '1ms'`,
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { admin.Exec(context.WithoutCancel(ctx), `DROP ROLE `+role) })
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = neturl.User(role)
	pool, err := db.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `SELECT pg_sleep(0.05)`); err != nil {
		t.Errorf("a statement on a pool of a poisoned role: %v", err)
	}
	var st string
	if err := pool.QueryRow(ctx, `SHOW statement_timeout`).Scan(&st); err != nil || st != "0" {
		t.Errorf("statement_timeout = %q (%v), want 0", st, err)
	}
	ccfg, err := db.ParseConnConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Connect(ctx, ccfg, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SELECT pg_sleep(0.05)`); err != nil {
		t.Errorf("a statement on a dedicated connection of a poisoned role: %v", err)
	}
}
