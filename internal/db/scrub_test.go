package db_test

import (
	"strings"
	"testing"

	"github.com/studioctl/studioctl/internal/db"
)

func TestScrubTextHidesPasswords(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		secrets []string
		want    string
	}{
		{"the database password anywhere", "PGPASSWORD=hunter2\nlogin with hunter2!", []string{"hunter2"},
			"PGPASSWORD=xxxxx\nlogin with xxxxx!"},
		{"the database password escaped as in a URL", "p%40ss+w%2Frd, p@ss%20w%2Frd and p%40ss%20w%2Frd", []string{"p@ss w/rd"},
			"xxxxx, xxxxx and xxxxx"},
		{"a postgres URL", "connecting to postgres://u:hunter2@h/db now", nil,
			"connecting to postgres://u:xxxxx@h/db now"},
		{"any scheme", "https://bot:t0k3n@api.example.com/v1 and redis://:pw@cache:6379/0", nil,
			"https://bot:xxxxx@api.example.com/v1 and redis://:xxxxx@cache:6379/0"},
		{"an upper-case scheme", "POSTGRES://U:Secret@H/DB", nil, "POSTGRES://U:xxxxx@H/DB"},
		{"a password with an @ in it", "postgres://u:p@ss@h:5432/db", nil, "postgres://u:xxxxx@h:5432/db"},
		{"a URL in quotes", `url="postgresql://app:s3cr3t@db.internal/app?sslmode=require"`, nil,
			`url="postgresql://app:xxxxx@db.internal/app?sslmode=require"`},
		{"a password in the query", "postgres://h/db?user=u&password=hunter2&sslmode=off", nil,
			"postgres://h/db?user=u&password=xxxxx"},
		{"a keyword/value string", "host=h user=u password=hunter2 dbname=d", nil,
			"host=h user=u password=xxxxx dbname=d"},
		{"a quoted keyword password", "host=h PASSWORD = 'se cr\\'et' dbname=d", nil,
			"host=h PASSWORD = xxxxx dbname=d"},
		{"any PGPASSWORD setting", "PGPASSWORD=other-secret\nexport pgpassword='a b'", nil,
			"PGPASSWORD=xxxxx\nexport pgpassword=xxxxx"},
		{"a URL without a password is kept", "see https://example.com/a@b and mailto:x@y", nil,
			"see https://example.com/a@b and mailto:x@y"},
		{"a user without a password is kept", "postgres://app@db/app", nil, "postgres://app@db/app"},
		{"empty secrets are ignored", "nothing to hide", []string{"", ""}, "nothing to hide"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := db.ScrubText(tt.in, tt.secrets...); got != tt.want {
				t.Errorf("ScrubText(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestScrubTailHidesASecretCutAtTheStart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"the end of the password", "nter2 and more", "xxxxx and more"},
		{"the end of a URL's password", "r:hunter2@h/db", "xxxxx@h/db"},
		{"the end of a URL's password that is not the database's", "3cr3t@h/db rest", "xxxxx@h/db rest"},
		{"a clean start is kept", "lines of output", "lines of output"},
		{"the whole text is still scrubbed", "ok\npostgres://u:hunter2@h/db", "ok\npostgres://u:xxxxx@h/db"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := db.ScrubTail(tt.in, "hunter2"); got != tt.want {
				t.Errorf("ScrubTail(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func FuzzScrubTextNeverLeavesTheSecret(f *testing.F) {
	f.Add("postgres://u:hunter2@h/db", "hunter2")
	f.Add("x hunter2hunter2 y", "hunter2")
	f.Add("password='a\\'b' z", "a'b")
	f.Fuzz(func(t *testing.T, text, secret string) {
		if len(secret) < 2 || strings.Contains(db.Hidden, secret) || strings.Contains(secret, db.Hidden[:1]) {
			t.Skip()
		}
		got := db.ScrubText(text, secret)
		if strings.Contains(got, secret) {
			t.Errorf("ScrubText(%q, %q) = %q still holds the secret", text, secret, got)
		}
	})
}
