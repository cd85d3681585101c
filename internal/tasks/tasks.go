// Package tasks runs the three kinds of task a scheduled job can have
// (SPEC §5.1): a command in its own process group, an SQL statement in one
// transaction, and an HTTP request. A task knows nothing about locks,
// timers or run records: the runner gives it a context that is done at the
// run's timeout, on lock loss or at shutdown, and records the Result.
package tasks

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// OutputTailBytes is how much of a task's output (or HTTP response body) is
// kept: the LAST 4 KiB.
const OutputTailBytes = 4096

// DefaultKillGrace: an interrupted command gets SIGTERM, then SIGKILL after
// this grace period.
const DefaultKillGrace = 5 * time.Second

// Env is what a task knows about its run.
type Env struct {
	JobID     string
	ReplicaID string
	RunSeq    int64
	Cluster   string // "" when the job is not per cluster
	// Deadline, when set, says by when every process of a command must be
	// gone unless the replica moves it later: the end of the trust window
	// of a duty's lease, or lock_until minus a margin for an installation
	// job. The command reads it every DeadlineRefreshEvery and passes it to
	// its job shim, which ends the whole process tree with SIGKILL when the
	// deadline passes, even while the replica is paused (SIGSTOP) and
	// cannot stop the run itself (docs/jobs-processes.md). The zero time
	// means no deadline. sql and http tasks ignore it.
	Deadline func() time.Time
	// ScheduledAt is the run's nominal time: the due time it is the
	// occurrence of, in database time (a trigger's time for a `jobs
	// trigger` run); OccurrenceKey is jobs.OccurrenceKey of the job, its
	// scope key and ScheduledAt, the same string on every replica for the
	// same occurrence; Triggered, a `jobs trigger` run (STUDIO_TRIGGERED,
	// Studio-Triggered, studio.triggered: "true" or "false"). A command gets them
	// as STUDIO_SCHEDULED_AT and STUDIO_OCCURRENCE_KEY, an HTTP request as
	// Studio-Scheduled-At and Studio-Occurrence-Key, an SQL statement as
	// the session settings studio.scheduled_at and studio.occurrence_key.
	// A zero ScheduledAt is sent as "" (unknown).
	ScheduledAt   time.Time
	OccurrenceKey string
	Triggered     bool
	// FencingToken is the run's fencing token (docs/fencing.md): its
	// lock's for an installation job, its lease's generation for a
	// per-cluster duty, 0 (sent as "") for an instance job. A command gets
	// it as STUDIO_FENCING_TOKEN, an HTTP request as Studio-Fencing-Token,
	// an SQL statement as the session setting studio.fencing_token.
	FencingToken int64
}

// fencingToken is FencingToken as the run's environment, header and
// session setting carry it ("" for none).
func (env Env) fencingToken() string {
	if env.FencingToken == 0 {
		return ""
	}
	return strconv.FormatInt(env.FencingToken, 10)
}

// triggered is Triggered as the run's environment, header and session
// setting carry it: "true" or "false".
func (env Env) triggered() string { return strconv.FormatBool(env.Triggered) }

// scheduledAt is ScheduledAt as jobs.FormatNominal writes it ("" when
// zero).
func (env Env) scheduledAt() string {
	if env.ScheduledAt.IsZero() {
		return ""
	}
	return env.ScheduledAt.UTC().Truncate(time.Millisecond).Format(nominalLayout)
}

// nominalLayout is jobs.NominalLayout (tasks does not import jobs, which
// imports tasks).
const nominalLayout = "2006-01-02T15:04:05.000Z07:00"

// Result of one run. Err is nil on success. Output is the tail (at most
// OutputTailBytes) of the combined stdout+stderr, of the response body, or
// the SQL command tag.
type Result struct {
	Output string
	Err    error
}

// Task is one kind of work a job runs.
type Task interface {
	Kind() string // "command" | "sql" | "http"
	// Run runs the task once. It must return promptly after ctx is done
	// (the runner cancels ctx at the timeout, on lock loss, or at shutdown).
	Run(ctx context.Context, env Env) Result
}

// Task kinds, as Kind returns them.
const (
	KindCommand = "command"
	KindSQL     = "sql"
	KindHTTP    = "http"
)

var (
	_ Task = Command{}
	_ Task = SQL{}
	_ Task = HTTP{}
)

// runSeq formats env.RunSeq for environment variables and headers.
func (env Env) runSeq() string { return strconv.FormatInt(env.RunSeq, 10) }

// withCause makes err say why ctx is done, so that a caller can tell a
// timeout from a lost lock or a shutdown with errors.Is on the cause. It
// returns err unchanged when ctx is not done or err already wraps the cause.
func withCause(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	cause := context.Cause(ctx)
	if errors.Is(err, cause) {
		return err
	}
	return fmt.Errorf("%w: %w", cause, err)
}

// tailBuffer is an io.Writer that keeps only the last max bytes written to
// it, in a buffer allocated once. It is not safe for concurrent use.
type tailBuffer struct {
	buf       []byte
	max       int
	truncated bool
}

func newTailBuffer(max int) *tailBuffer {
	return &tailBuffer{buf: make([]byte, 0, max), max: max}
}

// Write keeps the tail of p; it never fails.
func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= t.max {
		t.truncated = t.truncated || len(p) > t.max || len(t.buf) > 0
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.truncated = true
		t.buf = t.buf[:copy(t.buf, t.buf[over:])]
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// String returns the kept tail. When older output was dropped, a UTF-8
// sequence cut in two at the start of the tail is dropped too.
func (t *tailBuffer) String() string {
	b := t.buf
	if t.truncated {
		for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
			b = b[1:]
		}
	}
	return string(b)
}
