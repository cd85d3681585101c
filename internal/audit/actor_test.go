package audit

import (
	"errors"
	"os"
	"os/user"
	"strconv"
	"strings"
	"testing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestActorNameTakesUserThenLognameThenTheUidsNameThenTheUid(t *testing.T) {
	named := func(int) (string, error) { return "builder", nil }
	nameless := func(int) (string, error) { return "", errors.New("user: unknown userid 4242") }
	for _, tc := range []struct {
		name   string
		env    map[string]string
		lookup func(int) (string, error)
		want   string
	}{
		{"USER wins", map[string]string{"USER": "alice", "LOGNAME": "bob"}, named, "alice"},
		{"LOGNAME when USER is unset", map[string]string{"LOGNAME": "bob"}, named, "bob"},
		{"the uid's name when neither is set", nil, named, "builder"},
		{"uid:N when the uid has no name", nil, nameless, "uid:4242"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := actorName(env(tc.env), 4242, tc.lookup); got != tc.want {
				t.Errorf("actorName = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDefaultActorWithoutUserOrLognameIsTheProcesssUserNotUnknown(t *testing.T) {
	u, err := user.LookupId(strconv.Itoa(os.Getuid()))
	if err != nil {
		t.Fatalf("this test needs a named uid: %v", err)
	}
	host, _ := os.Hostname()
	got := DefaultActor(env(nil))
	if want := u.Username + "@" + host; got != want {
		t.Errorf("DefaultActor with no USER or LOGNAME = %q, want %q", got, want)
	}
	if strings.HasPrefix(got, "unknown@") {
		t.Errorf("DefaultActor = %q: the uid has a name", got)
	}
}
