package db_test

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/studioctl/studioctl/internal/db"
)

// Fuzz targets of issue 7, deliverable 10, for the redaction that config
// show and every error use: the password never comes out, in any spelling
// an operator may write. `go test` runs the seeds; see docs/fuzzing.md.

// neutralPassword stands for the password in the reference string that
// every spelling is compared with: what appears in the output as often
// for it as for the real password was not the password.
const neutralPassword = "Q"

// Spellings of a connection string with a password, chosen by form.
const (
	formURLUserInfo  = iota // scheme://user:pw@host/db?tail
	formURLQuery            // scheme://user@host/db?password=pw&tail
	formKeywordValue        // host=h password=pw dbname=d, in any order
	formCount
)

// schemes are the URL schemes the forms use; caseMask then changes the
// case of their letters.
var schemes = []string{"postgres", "postgresql"}

// leads are the whitespace an operator may leave before the string.
var leads = []string{"", " ", "\t", "\n", "  \r\n"}

// Bits of style.
const (
	styleSchemeBit   = 1 << 0 // postgresql:// instead of postgres://
	styleEscapeShift = 1      // 2 bits: net/url's escaping, every byte %XX, non-alphanumerics %xx
	styleUnquotedBit = 1 << 3 // a keyword value without quotes, when it needs none
	styleSepShift    = 4      // 2 bits: "=", " = ", "= ", " ="
	stylePosShift    = 6      // 2 bits: where the password keyword goes
)

// spelling builds one connection string holding pw and returns it with
// the forms of pw it writes (what must not come out).
func spelling(form, lead, style uint8, caseMask uint16, user, pw, host string) (string, []string) {
	ws := leads[int(lead)%len(leads)]
	mixCase := func(s string) string {
		b := []byte(s)
		for i := range b {
			if caseMask&(1<<(i%16)) != 0 && b[i] >= 'a' && b[i] <= 'z' {
				b[i] -= 'a' - 'A'
			}
		}
		return string(b)
	}
	scheme := mixCase(schemes[int(style&styleSchemeBit)])
	// How the password is written in a URL: as net/url writes it (user
	// info or query escaping), every byte as %XX, or only what is not a
	// letter or digit, in lower-case hex.
	escape := func(canonical string) string {
		var b strings.Builder
		switch (style >> styleEscapeShift) & 3 {
		case 1:
			for i := 0; i < len(pw); i++ {
				fmt.Fprintf(&b, "%%%02X", pw[i])
			}
		case 2:
			for i := 0; i < len(pw); i++ {
				if c := pw[i]; (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') {
					b.WriteByte(c)
				} else {
					fmt.Fprintf(&b, "%%%02x", c)
				}
			}
		default:
			return canonical
		}
		return b.String()
	}
	urlUser := url.User(user).String()
	urlHost := url.PathEscape(host)
	switch int(form) % formCount {
	case formURLUserInfo:
		urlPW := escape(strings.TrimPrefix(url.UserPassword("", pw).String(), ":"))
		return ws + scheme + "://" + urlUser + ":" + urlPW + "@" + urlHost + "/app?sslmode=disable", []string{pw, urlPW}
	case formURLQuery:
		key := mixCase("password")
		urlPW := escape(url.QueryEscape(pw))
		return ws + scheme + "://" + urlUser + "@" + urlHost + "/app?application_name=x&" + key + "=" + urlPW + "&sslmode=disable", []string{pw, urlPW}
	default:
		key := mixCase("password")
		quote := func(s string) string {
			return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
		}
		val := quote(pw)
		if style&styleUnquotedBit != 0 && pw != "" && !strings.ContainsAny(pw, " \t\n\r\v\f'\\") {
			val = pw
		}
		sep := []string{"=", " = ", "= ", " ="}[(style>>styleSepShift)&3]
		pair := key + sep + val
		parts := []string{"host=" + quote(host), "user=" + quote(user), "dbname=app"}
		at := int(style>>stylePosShift) % (len(parts) + 1)
		parts = append(parts[:at], append([]string{pair}, parts[at:]...)...)
		return ws + strings.Join(parts, " "), []string{pw, val}
	}
}

// leaks reports the forms of the password that out shows more often than
// ref, the same text made with neutralPassword, does.
func leaks(out, ref string, forms []string) []string {
	var shown []string
	for _, f := range forms {
		if len(f) >= 4 && strings.Count(out, f) > strings.Count(ref, f) {
			shown = append(shown, f)
		}
	}
	return shown
}

// FuzzRedact: Redact and Scrub hide the password of a URL (user info or
// query, any scheme case, leading whitespace, any escaping) and of a
// keyword/value string (any keyword case, spaces around "=", quoted with
// escaped quotes and backslashes, any position).
func FuzzRedact(f *testing.F) {
	for _, s := range []struct {
		form, lead, style uint8
		caseMask          uint16
		user, pw, host    string
	}{
		// Spellings that Scrub still shows wait in testdata/fuzz-pending
		// (docs/fuzzing.md).
		{formURLUserInfo, 0, 0, 0xffff, "app", "upper-case-scheme", "db.example"},             // POSTGRES://
		{formURLUserInfo, 1, 0, 0, "app", "after-a-space", "db.example"},                      // leading space
		{formURLUserInfo, 4, styleSchemeBit, 0x0001, "app", "after-crlf", "db.example"},       // Postgresql:// after "  \r\n"
		{formKeywordValue, 0, styleUnquotedBit, 0xffff, "app", "upper-keyword", "db.example"}, // PASSWORD=
		{formURLQuery, 0, 0, 0x00ff, "app", "upper-query-key", "db.example"},                  // ?PASSWORD=
		{formURLUserInfo, 0, 0, 0, "app", "s3cr3t-pw", "db.example"},
		{formURLUserInfo, 0, styleSchemeBit, 0, "app", "p@ss/w0rd?#", "db.example"},
		{formURLUserInfo, 0, 0, 0, "app", "with space+plus", "db.example"},
		{formURLUserInfo, 0, 0, 0, "app", "ümlaut-pässwörd", "db.example"},
		{formURLUserInfo, 0, 0, 0, "s3cr3t-pw", "s3cr3t-pw", "db.example"},
		{formURLQuery, 0, 0, 0, "app", "query-secret", "db.example"},
		{formURLQuery, 0, 0, 0, "app", "query&secret=1 +", "db.example"},
		{formKeywordValue, 0, styleUnquotedBit, 0, "app", "kv-secret", "db.example"},
		{formKeywordValue, 0, 0, 0, "app", "a quoted secret", "db.example"},
		{formKeywordValue, 0, styleUnquotedBit | 3<<stylePosShift, 0, "app", "last-secret", "db.example"},
		{formKeywordValue, 0, 1 << styleSepShift, 0, "app", "a=b c=d", "db.example"},
		{formKeywordValue, 0, 0, 0, "app", "password=inner", "db.example"},
	} {
		f.Add(s.form, s.lead, s.style, s.caseMask, s.user, s.pw, s.host)
	}
	f.Fuzz(func(t *testing.T, form, lead, style uint8, caseMask uint16, user, pw, host string) {
		s, forms := spelling(form, lead, style, caseMask, user, pw, host)
		ref, _ := spelling(form, lead, style, caseMask, user, neutralPassword, host)
		if got := leaks(db.Redact(s), db.Redact(ref), forms); len(got) > 0 {
			t.Errorf("Redact(%q) = %q shows the password as %q", s, db.Redact(s), got)
		}
		errText := func(conn string) string {
			return db.Scrub(errors.New("connect "+conn+": failed"), conn).Error()
		}
		if got := leaks(errText(s), errText(ref), forms); len(got) > 0 {
			t.Errorf("Scrub of an error quoting %q = %q shows the password as %q", s, errText(s), got)
		}
	})
}

// FuzzRedactWhatPgxReads: whatever string pgx itself reads a password
// from, Redact and Scrub do not show that password (beyond the times the
// string holds it outside the password, as a user name equal to it).
func FuzzRedactWhatPgxReads(f *testing.F) {
	// Only the string may give a password: not the environment or a file.
	f.Setenv("PGPASSWORD", "")
	f.Setenv("PGPASSFILE", "/nonexistent/pgpass")
	f.Setenv("PGSERVICE", "")
	f.Setenv("PGSERVICEFILE", "/nonexistent/pg_service.conf")
	for _, s := range []string{
		"postgres://app:s3cr3t-pw@db.example:5432/app",
		"postgresql://app:p%40ss%2Fw0rd%3F@db.example/app",
		"postgres://app@db.example/app?password=query-secret",
		"postgres://app:s3cr3t-pw@/app?host=/tmp",
		"host=db.example user=app password=kv-secret dbname=app",
		"host=db.example user=app password = 'it''s a secret' dbname=app",
		`host=db.example password='it\'s a \\secret\\'`,
		"password=kv-secret",
		"user=same-as-pw password=same-as-pw",
		"host=h password=trailing-quote'",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lower := strings.ToLower(s)
		if strings.Contains(lower, "ssl") || strings.Contains(lower, "passfile") || strings.Contains(lower, "service") {
			return // pgx would read files the input names
		}
		cfg, err := pgconn.ParseConfig(s)
		// Too short to tell from other text, or part of what Redact writes.
		if err != nil || len(cfg.Password) < 4 || strings.Contains("xxxxx (unparseable url, hidden)", cfg.Password) {
			return
		}
		pw := cfg.Password
		allowed := max(strings.Count(s, pw)-1, 0)
		if out := db.Redact(s); strings.Count(out, pw) > allowed {
			t.Errorf("Redact(%q) = %q shows the password %q pgx reads", s, out, pw)
		}
		msg := db.Scrub(errors.New("connect "+s+": failed"), s).Error()
		if strings.Count(msg, pw) > allowed {
			t.Errorf("Scrub of an error quoting %q = %q shows the password %q pgx reads", s, msg, pw)
		}
	})
}
