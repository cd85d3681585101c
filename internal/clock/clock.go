// Package clock lets the runner's timers be driven by a fake clock in tests
// and skewed in fault tests. Decisions that matter between replicas never
// use it: they use database time.
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the runner uses.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration)
}

// Real is the system clock.
type Real struct{}

func (Real) Now() time.Time { return time.Now() }

func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Stop() bool            { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }

// Offset is a real clock that is off by a fixed amount (a replica whose
// clock is wrong). Timers run at the real rate.
type Offset struct{ By time.Duration }

func (o Offset) Now() time.Time { return time.Now().Add(o.By) }

func (o Offset) NewTimer(d time.Duration) Timer { return Real{}.NewTimer(d) }

// Fake is a clock that moves only when told to.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

// NewFake returns a fake clock reading t.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, c: make(chan time.Time, 1), at: f.now.Add(d), active: true}
	f.timers = append(f.timers, t)
	if d <= 0 {
		f.fireLocked(t)
	}
	return t
}

// Advance moves the clock forward by d, firing every timer that comes due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	sort.Slice(f.timers, func(i, j int) bool { return f.timers[i].at.Before(f.timers[j].at) })
	for _, t := range f.timers {
		if t.active && !t.at.After(f.now) {
			f.fireLocked(t)
		}
	}
}

// Pending is the number of active timers (tests poll it to know the runner
// has gone back to waiting).
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, t := range f.timers {
		if t.active {
			n++
		}
	}
	return n
}

// NextDue is when the earliest active timer fires (zero if none).
func (f *Fake) NextDue() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	var next time.Time
	for _, t := range f.timers {
		if t.active && (next.IsZero() || t.at.Before(next)) {
			next = t.at
		}
	}
	return next
}

func (f *Fake) fireLocked(t *fakeTimer) {
	t.active = false
	select {
	case t.c <- f.now:
	default:
	}
}

type fakeTimer struct {
	f      *Fake
	c      chan time.Time
	at     time.Time
	active bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := t.active
	t.active = false
	return was
}

func (t *fakeTimer) Reset(d time.Duration) {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.at = t.f.now.Add(d)
	t.active = true
	if d <= 0 {
		t.f.fireLocked(t)
	}
}
