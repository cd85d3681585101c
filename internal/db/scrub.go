package db

import (
	"net/url"
	"regexp"
	"strings"
)

// Hidden is what a scrubbed secret becomes, as in Redact.
const Hidden = "xxxxx"

var (
	// urlPassword finds the password of a URL written with one,
	// scheme://user:password@host: the user stops at ':', the password runs
	// to the last '@' before the path, the query, the fragment or white space.
	urlPassword = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.\-]*://[^\s:/?#@]*:)[^\s/?#]*@`)
	// keywordPassword finds the password of a libpq keyword/value string,
	// password=secret or password='se cret', and a PGPASSWORD=secret
	// setting, in any case.
	keywordPassword = regexp.MustCompile(`(?i)(\b(?:pg)?password\s*=\s*)(?:'(?:[^'\\]|\\.)*'?|[^\s'][^\s]*)`)
	// tailUserinfo is the end of a URL's user and password at the start of a
	// text whose beginning was cut off: "nter2@host/db".
	tailUserinfo = regexp.MustCompile(`^[^\s/?#@]*@`)
)

// ScrubText returns s with every secret hidden: each of secrets (the
// database password of the replica's own connection) as written and as a
// URL would escape it, the password of any URL (scheme://user:password@host)
// and the password of a keyword/value connection string (password=...) or
// of a PGPASSWORD=... setting.
// Each becomes "xxxxx". Empty secrets are ignored.
//
// A secret is replaced wherever it appears, inside other words too: a
// short password hides more of the text than it should, never less.
func ScrubText(s string, secrets ...string) string {
	for _, secret := range secrets {
		if secret == "" {
			continue
		}
		userinfo := strings.TrimPrefix(url.UserPassword("", secret).String(), ":")
		for _, form := range []string{secret, url.QueryEscape(secret), url.PathEscape(secret), userinfo} {
			s = strings.ReplaceAll(s, form, Hidden)
		}
	}
	s = urlPassword.ReplaceAllString(s, "${1}"+Hidden+"@")
	return keywordPassword.ReplaceAllString(s, "${1}"+Hidden)
}

// ScrubTail is ScrubText for the tail of a longer output, whose start was
// cut off and may be cut inside a secret: a start that is the end of one of
// secrets, or the end of a URL's user and password ("r:hunter2@host"), is
// hidden too.
func ScrubTail(s string, secrets ...string) string {
	s = ScrubText(s, secrets...)
	for _, secret := range secrets {
		for n := len(secret) - 1; n > 0; n-- {
			if strings.HasPrefix(s, secret[len(secret)-n:]) {
				s = Hidden + s[n:]
				break
			}
		}
	}
	if loc := tailUserinfo.FindStringIndex(s); loc != nil && !strings.HasPrefix(s, Hidden+"@") {
		s = Hidden + "@" + s[loc[1]:]
	}
	return s
}
