package runner_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The runner's timing tests in a synctest bubble (testing/synctest): the
// runner runs on the real clock, which the bubble fakes. time.Sleep(d)
// moves the bubble's clock on by d once every goroutine in it is blocked,
// and synctest.Wait returns once every goroutine is blocked again: no
// fake clock to advance, no count of pending timers to wait for, and no
// polling.

// newBubbleEnv is newMemEnv for a test inside synctest.Test: no database,
// instance jobs only, the bubble's clock.
func newBubbleEnv(t *testing.T) *env {
	t.Helper()
	return &env{t: t, mem: newMemStore(), reg: prometheus.NewRegistry(), logs: &syncBuffer{}, bubble: true}
}

// advance lets d pass on the bubble's clock, then waits until the runner
// and its tasks have done what fell due and are blocked again.
func (e *env) advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// idleAt checks, once the bubble is settled, that job id is back on the
// timer, due at next.
func (e *env) idleAt(id string, next time.Time) {
	e.t.Helper()
	synctest.Wait()
	st := status(e.t, e.r, id)
	if st.Running || st.NextFireAt == nil || !st.NextFireAt.Equal(next) {
		e.t.Fatalf("%s: running %v, next fire %v; want it waiting for %s", id, st.Running, st.NextFireAt, next.Format(time.TimeOnly))
	}
}
