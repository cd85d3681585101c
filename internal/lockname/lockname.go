// Package lockname holds the rules of ShedLock's text columns: what a lock
// name (and a locked_by value) may be. It imports nothing of the project,
// so the job model (internal/jobs) checks a configured lock: name by the
// same rule the lock provider (internal/locks) applies.
package lockname

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxChars is the length of ShedLock's name column, VARCHAR(64): 64
// characters, not bytes (a German or Japanese name takes more bytes).
const MaxChars = 64

// ErrInvalid marks bad arguments (locks.ErrInvalid is the same value).
var ErrInvalid = errors.New("invalid lock argument")

// Validate checks a lock name as ShedLock's VARCHAR(64) takes it: not
// empty, valid UTF-8 without NUL, at most 64 characters (runes, not bytes).
// Any other character is allowed: ShedLock names are often camelCase
// (scheduledTaskName) or carry dots and spaces.
func Validate(name string) error {
	if name == "" {
		return fmt.Errorf("%w: lock name must not be empty", ErrInvalid)
	}
	return ValidText("lock name", name, MaxChars)
}

// ValidText checks a value for a VARCHAR(max) column: valid UTF-8, no NUL
// (PostgreSQL stores neither), at most max characters.
func ValidText(what, s string, max int) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalid, what, s)
	}
	if strings.ContainsRune(s, 0) {
		return fmt.Errorf("%w: %s %q contains a NUL character", ErrInvalid, what, s)
	}
	if n := utf8.RuneCountInString(s); n > max {
		return fmt.Errorf("%w: %s %q is %d characters, at most %d allowed", ErrInvalid, what, s, n, max)
	}
	return nil
}
