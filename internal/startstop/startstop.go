// Package startstop is the one lifecycle of every long-running service in
// studioctl (the registry heartbeat, the bus listener, the run store, the
// runner, the HTTP server, the lease loop, and the host that wires them),
// after River's startstop.
//
// A service embeds Base and implements Start as
//
//	func (s *Svc) Start(ctx context.Context) error {
//		ctx, err := s.StartInit(ctx)
//		if err != nil {
//			return fmt.Errorf("start svc: %w", err)
//		}
//		if err := s.connect(ctx); err != nil {
//			s.StartFailed()
//			return fmt.Errorf("start svc: %w", err)
//		}
//		s.Go(func() { s.loop(ctx) })
//		s.MarkStarted()
//		return nil
//	}
//
// and gets Stop, Started and Stopped from Base: Stop cancels the context that
// StartInit returned and waits for every goroutine started with Go. Stop is
// safe to call twice, concurrently, before Start, and while Start runs.
package startstop

import (
	"context"
	"errors"
	"sync"
)

// Service is the shape every long-running service has.
type Service interface {
	// Start starts the service's goroutines. It fails for real: an error
	// means nothing of the service runs and nothing is left behind.
	Start(ctx context.Context) error
	// Stop ends the service and waits for its goroutines. Safe to call
	// more than once, concurrently, and without Start.
	Stop()
	// Started is closed once Start has succeeded.
	Started() <-chan struct{}
	// Stopped is closed once the service has stopped (after Stop, or
	// after a failed Start).
	Stopped() <-chan struct{}
}

// ErrStarted is returned by a second Start.
var ErrStarted = errors.New("already started")

// ErrStopped is returned by a Start after Stop: a stopped service cannot
// be started again.
var ErrStopped = errors.New("already stopped")

// ErrStopping is the cause of the context of a service that is stopping.
var ErrStopping = errors.New("service stopping")

// Base keeps the lifecycle state of one service. The zero value is ready.
type Base struct {
	mu       sync.Mutex
	state    int // 0 new, 1 starting, 2 started, 3 stopped
	cancel   context.CancelCauseFunc
	wg       sync.WaitGroup
	started  chan struct{}
	stopped  chan struct{}
	stopOnce sync.Once
}

const (
	stateNew = iota
	stateStarting
	stateStarted
	stateStopped
)

func (b *Base) initLocked() {
	if b.started == nil {
		b.started = make(chan struct{})
		b.stopped = make(chan struct{})
	}
}

// StartInit begins a Start. It returns the context for the service's
// goroutines, detached from ctx's cancellation but not from its values
// (a service outlives the context of its start), and cancelled by Stop.
// It fails with ErrStarted or ErrStopped when the service was started or
// stopped before, and with ctx's cause when ctx is done.
func (b *Base) StartInit(ctx context.Context) (context.Context, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.initLocked()
	switch b.state {
	case stateStarting, stateStarted:
		return nil, ErrStarted
	case stateStopped:
		return nil, ErrStopped
	}
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	var runCtx context.Context
	runCtx, b.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	b.state = stateStarting
	return runCtx, nil
}

// Go runs f on a goroutine that the service owns: Stop waits for it. Once
// Stop has begun, Go runs nothing and reports false.
func (b *Base) Go(f func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == stateStopped {
		return false
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
	return true
}

// MarkStarted ends a successful Start: Started is closed.
func (b *Base) MarkStarted() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == stateStarting {
		b.state = stateStarted
		close(b.started)
	}
}

// StartFailed ends a failed Start: whatever Go started is stopped and
// waited for, and the service counts as stopped.
func (b *Base) StartFailed() { b.Stop() }

// Stop cancels the service's context and waits for its goroutines. Safe
// to call more than once, concurrently, and without Start.
func (b *Base) Stop() {
	b.mu.Lock()
	b.initLocked()
	cancel := b.cancel
	b.state = stateStopped
	b.mu.Unlock()
	if cancel != nil {
		cancel(ErrStopping)
	}
	b.wg.Wait()
	b.stopOnce.Do(func() { close(b.stopped) })
}

// Started is closed once Start has succeeded.
func (b *Base) Started() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.initLocked()
	return b.started
}

// Stopped is closed once Stop has returned.
func (b *Base) Stopped() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.initLocked()
	return b.stopped
}

// WaitStarted blocks until s has started, has stopped, or ctx is done, and
// says which: nil once started.
func WaitStarted(ctx context.Context, s Service) error {
	select {
	case <-s.Started():
		return nil
	case <-s.Stopped():
		return ErrStopped
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// StopAll stops services in the order given (the drain order), each fully
// before the next.
func StopAll(services ...Service) {
	for _, s := range services {
		if s != nil {
			s.Stop()
		}
	}
}
