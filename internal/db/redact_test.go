package db_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/studioctl/studioctl/internal/db"
)

// TestRedactHidesThePasswordInEverySpelling covers the spellings `config
// show` used to print (POSTGRES://, a leading space, PASSWORD=) and the
// others libpq or pgx accept.
func TestRedactHidesThePasswordInEverySpelling(t *testing.T) {
	const pw = "Hunter2-Secret"
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"an upper-case scheme", "POSTGRES://app:" + pw + "@db/app", "POSTGRES://app:xxxxx@db/app"},
		{"a mixed-case postgresql scheme", "PostgreSQL://app:" + pw + "@db/app", "PostgreSQL://app:xxxxx@db/app"},
		{"a leading space before the URL", " postgres://app:" + pw + "@db/app", "postgres://app:xxxxx@db/app"},
		{"surrounding tabs and newlines", "\t\npostgres://app:" + pw + "@db/app\n", "postgres://app:xxxxx@db/app"},
		{"a multi-host URL", "postgres://app:" + pw + "@h1:5432,h2:5433/app?target_session_attrs=read-write", "postgres://app:xxxxx@h1:5432,h2:5433/app?target_session_attrs=read-write"},
		{"a percent-encoded password", "postgres://app:p%40ss%2Fw0rd@db/app", "postgres://app:xxxxx@db/app"},
		{"a raw @ in the password", "postgres://app:p@" + pw + "@db/app", "postgres://app:xxxxx@db/app"},
		{"a raw / and ? in the password", "postgres://app:a/b?" + pw + "@db/app", "postgres://app:xxxxx@db/app"},
		{"a password in the query", "postgres://app@db/app?sslmode=require&password=" + pw, "postgres://app@db/app?sslmode=require&password=xxxxx"},
		{"an upper-case password key in the query", "postgres://app@db/app?PASSWORD=" + pw, "postgres://app@db/app?PASSWORD=xxxxx"},
		{"a percent-encoded password key in the query", "postgres://app@db/app?pass%77ord=" + pw, "postgres://app@db/app?pass%77ord=xxxxx"},
		{"an sslpassword in the query", "postgres://app@db/app?sslpassword=" + pw, "postgres://app@db/app?sslpassword=xxxxx"},
		{"both user info and query passwords", "postgres://app:" + pw + "@db/app?password=" + pw + "#frag", "postgres://app:xxxxx@db/app?password=xxxxx#frag"},
		{"a URL that does not parse", "postgres://app:" + pw + "@db:port%zz/app", "postgres://app:xxxxx@db:port%zz/app"},
		{"a URL without a password keeps its @ in the query", "postgres://db/app?application_name=me@x", "postgres://db/app?application_name=me@x"},
		{"an empty password is still marked", "postgres://app:@db/app", "postgres://app:xxxxx@db/app"},
		{"an upper-case PASSWORD keyword", "host=db user=app PASSWORD=" + pw, "host=db user=app PASSWORD=xxxxx"},
		{"a mixed-case Password keyword", "Password=" + pw + " host=db", "Password=xxxxx host=db"},
		{"spaces around =", "host=db password = " + pw + " user=app", "host=db password = xxxxx user=app"},
		{"a quoted value with an escaped quote", `host=db password='se cr\'et ` + pw + `' user=app`, "host=db password=xxxxx user=app"},
		{"a quoted value with an escaped backslash", `password='a\\` + pw + `' host=db`, "password=xxxxx host=db"},
		{"an unterminated quote hides the rest", "host=db password='" + pw + " user=app", "host=db password=xxxxx"},
		{"an unterminated quote of another keyword swallows the password", "host='db password=" + pw, "host=xxxxx"},
		{"an unterminated quote of another keyword swallows an upper-case sslpassword", "host=db application_name='x SSLPASSWORD = " + pw + " user=app", "host=db application_name=xxxxx"},
		{"an unterminated quote without a password is kept", "host=db application_name='my app", "host=db application_name='my app"},
		{"an unquoted value with a backslash escape", `password=a\ ` + pw + ` host=db`, "password=xxxxx host=db"},
		{"tabs between keywords", "host=db\tpassword=" + pw + "\tuser=app", "host=db\tpassword=xxxxx\tuser=app"},
		{"a leading space before keywords", "  password=" + pw, "password=xxxxx"},
		{"a keyword sslpassword", "host=db sslpassword=" + pw, "host=db sslpassword=xxxxx"},
		{"a forgotten = still hides the next word", "host=db password " + pw, "host=db password xxxxx"},
		{"no password at all is unchanged", "host=db user=app dbname=app", "host=db user=app dbname=app"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := db.Redact(tt.in)
			if got != tt.want {
				t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
			}
			for _, part := range []string{pw, "se cr", "p%40ss", "p@ss"} {
				if strings.Contains(got, part) {
					t.Errorf("Redact(%q) = %q still shows %q", tt.in, got, part)
				}
			}
			// Whatever password pgx itself would read from the string is gone
			// (one too short to be told apart from the rest is not checked).
			if cfg, err := pgconn.ParseConfig(tt.in); err == nil && len(cfg.Password) >= 4 && strings.Contains(got, cfg.Password) {
				t.Errorf("Redact(%q) = %q shows pgx's password %q", tt.in, got, cfg.Password)
			}
		})
	}
}

// TestRedactAndScrubAgreeOnThePassword: an error naming the password of any
// of these spellings is scrubbed.
func TestRedactAndScrubAgreeOnThePassword(t *testing.T) {
	const pw = "Scrub-Me-9"
	for _, cs := range []string{
		"POSTGRES://app:" + pw + "@db/app",
		" postgres://app:" + pw + "@db/app",
		"postgres://app@db/app?PASSWORD=" + pw,
		"host=db PASSWORD=" + pw,
		"host=db password = '" + pw + "'",
	} {
		got := db.Scrub(errString("failed for "+pw), cs)
		if strings.Contains(got.Error(), pw) {
			t.Errorf("Scrub with %q left the password: %q", cs, got)
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// TestRedactHidesThePasswordOfAMistypedURL: `config show` printed the
// password of a URL with a typo in its scheme, which pgx refuses (and
// whose password pgx hides in its own error).
func TestRedactHidesThePasswordOfAMistypedURL(t *testing.T) {
	const pw = "Hunter2-Secret"
	tests := []struct{ in, want string }{
		{"postgres:/app:" + pw + "@db/app", "postgres:/app:xxxxx@db/app"},
		{"postgres:app:" + pw + "@db/app", "postgres:app:xxxxx@db/app"},
		{"postgres//app:" + pw + "@db/app", "postgres//app:xxxxx@db/app"},
		{"PostgreSQL:app:" + pw + "@db/app", "PostgreSQL:app:xxxxx@db/app"},
		{"postgres:/app:p/" + pw + "@db/app?sslmode=disable", "postgres:/app:xxxxx@db/app?sslmode=disable"},
		{"app:" + pw + "@db/app", "app:xxxxx@db/app"},
		{"//app:" + pw + "@db/app", "//app:xxxxx@db/app"},
		{"postgres:/db/app?password=" + pw, "postgres:/db/app?password=xxxxx"},
		{"host=db user=app:x@y", "host=db user=app:x@y"},
	}
	for _, tt := range tests {
		if got := db.Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
