// Package top is the model of `studioctl top`: one full-screen view of the
// installation (replicas, jobs, locks, leases and the event stream) with a
// header of what is wrong and the safe actions one key away. It is the Elm
// shape Bubble Tea runs: Update takes a message and returns the next model
// and a command, View is a pure function of the model. It reads nothing and
// changes nothing itself: its data comes through Source (the list
// commands' own rows and doctor's checks) and its actions through Actor (the
// verbs' own run functions); Feed delivers the data live, as --watch does.
// docs/top.md describes the screen.
package top

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/studioctl/studioctl/internal/output"
)

// View is one of the screen's tables.
type View int

// The views, in the order of their keys (1-5).
const (
	Replicas View = iota
	Jobs
	Locks
	Leases
	Events
	numViews
)

// String is the view's name, as its list command names it.
func (v View) String() string {
	return [...]string{"replicas", "jobs", "locks", "leases", "events"}[v]
}

// Table is one read of a view: the columns and rows its list command
// prints (table format, relative times). The first column is the key the
// actions and the drill-down name.
type Table struct {
	Columns []string
	Rows    [][]output.Cell
}

// Check is one of doctor's checks as the header shows it.
type Check struct {
	// Name is doctor's check name (stale_locks); Label what the header
	// calls it (stale).
	Name, Label string
	// Status is doctor's: ok, warn, fail or skip.
	Status string
	Detail string
}

// Snapshot is one read: a view's table and the header's checks.
type Snapshot struct {
	View   View
	Table  Table
	Header []Check
	// At is when it was read (the display clock).
	At time.Time
}

// Source reads what the screen shows. Implementations run the list
// commands' own reads (cmd/studioctl/top.go).
type Source interface {
	// Load reads one view (the snapshot's Header is nil).
	Load(ctx context.Context, v View) (Snapshot, error)
	// Header runs the header's checks.
	Header(ctx context.Context) ([]Check, error)
	// Mark reads the marks of view v and of the header, in one cheap
	// statement. The feed reads them before a read, and reads again only
	// what changed (docs/top.md, "Cost").
	Mark(ctx context.Context, v View) (Marks, error)
	// Detail is the drill-down of one row of a view, as the verbs that
	// show it print it. For a job, why names the occurrence jobs why tells
	// of (nil: the verb's default, the last that fell due).
	Detail(ctx context.Context, v View, key string, why *Occurrence) (Detail, error)
}

// Detail is a drill-down: its text and, for a job, the occurrences it
// lists, each of which the operator may select for jobs why.
type Detail struct {
	Text        string
	Occurrences []Occurrence
}

// Occurrence is one occurrence a job's drill-down lists: jobs why JOB --at
// At --scope Scope tells of it.
type Occurrence struct {
	Job   string
	At    time.Time
	Scope string
	// Line is the line of the drill-down's text that shows it.
	Line int
}

// Args is jobs why for the occurrence, as the command line takes it.
func (o Occurrence) Args() []string {
	return []string{"jobs", "why", o.Job, "--at", o.At.UTC().Format(time.RFC3339Nano), "--scope", o.Scope}
}

// CommandLine is the equivalent studioctl command, quoted for a POSIX shell.
func (o Occurrence) CommandLine() string {
	q := []string{"studioctl"}
	for _, s := range o.Args() {
		q = append(q, shellQuote(s))
	}
	return strings.Join(q, " ")
}

// Marks fingerprint what a view's read and the header's read show: two
// equal marks, the two reads would show the same rows, but for relative
// times and what moves with time alone that the marks do not take (the
// refresh reads those, Feed). What the header's checks judge by time (a
// job becoming overdue, a pause's end, a lock or lease expiring) is in
// the marks, judged by the database's clock. "" is no mark: read every
// time.
type Marks struct {
	View, Header string
}

// Verb is one action's verb.
type Verb int

// The actions.
const (
	ReleaseLock Verb = iota
	DrainReplica
	TriggerJob
	PauseJob
	ResumeJob
	ReleaseLease
)

// Action is one action on one row.
type Action struct {
	Verb   Verb
	Target string
	Reason string
	// Force: a lock's release by force (locks release --force), which the
	// verb allows whatever its holder; Holder and HolderState are the
	// lock's holder and whether it is live, as the row showed them.
	Force       bool
	Holder      string
	HolderState string
}

// Args is the action as studioctl's command line takes it, without the
// program name: the equivalent command the confirmation shows.
func (a Action) Args() []string {
	var args []string
	switch a.Verb {
	case ReleaseLock:
		args = []string{"locks", "release", a.Target}
	case DrainReplica:
		args = []string{"replicas", "drain", a.Target}
	case TriggerJob:
		args = []string{"jobs", "trigger", a.Target}
	case PauseJob:
		args = []string{"jobs", "pause", a.Target}
	case ResumeJob:
		args = []string{"jobs", "resume", a.Target}
	case ReleaseLease:
		args = []string{"leases", "release", a.Target}
	}
	if a.Force {
		args = append(args, "--force")
	}
	if a.Reason != "" {
		args = append(args, "--reason", a.Reason)
	}
	return append(args, "--yes")
}

// CommandLine is the equivalent studioctl command, quoted for a POSIX shell.
func (a Action) CommandLine() string {
	args := a.Args()
	q := make([]string, 0, len(args)+1)
	q = append(q, "studioctl")
	for _, s := range args {
		q = append(q, shellQuote(s))
	}
	return strings.Join(q, " ")
}

// Question is what the confirmation asks, as the verb asks it.
func (a Action) Question() string {
	switch {
	case a.Verb == ReleaseLock && a.Force:
		return fmt.Sprintf("release lock %q by force? its holder %s is %s", a.Target, a.Holder, a.HolderState)
	}
	switch a.Verb {
	case ReleaseLock:
		return fmt.Sprintf("release lock %q?", a.Target)
	case DrainReplica:
		return fmt.Sprintf("drain replica %q?", a.Target)
	case TriggerJob:
		return fmt.Sprintf("trigger job %q?", a.Target)
	case PauseJob:
		return fmt.Sprintf("pause job %q?", a.Target)
	case ResumeJob:
		return fmt.Sprintf("resume job %q?", a.Target)
	default:
		return fmt.Sprintf("release cluster %q?", a.Target)
	}
}

// Warning is what the confirmation says besides the question: a forced
// release of a lock whose holder is live or unknown may let the job run
// twice ("" when there is nothing to say).
func (a Action) Warning() string {
	if a.Verb != ReleaseLock || !a.Force || a.HolderState == "gone" {
		return ""
	}
	return "its run may still be going: another replica may start the job meanwhile"
}

// Actor does the actions, each through its verb's own code path, audited
// with the actor as the verb audits it.
type Actor interface {
	// Do runs the action and returns what the verb said (its output), or
	// its error (a refusal among them).
	Do(ctx context.Context, a Action) (string, error)
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.,:/@=+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
