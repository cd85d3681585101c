package startstop_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/studioctl/studioctl/internal/startstop"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// svc is the smallest service: one goroutine that waits for its context.
type svc struct {
	startstop.Base
	fail  error
	ended chan error
}

func newSvc() *svc { return &svc{ended: make(chan error, 1)} }

func (s *svc) Start(ctx context.Context) error {
	ctx, err := s.StartInit(ctx)
	if err != nil {
		return err
	}
	s.Go(func() {
		<-ctx.Done()
		s.ended <- context.Cause(ctx)
	})
	if s.fail != nil {
		s.StartFailed()
		return s.fail
	}
	s.MarkStarted()
	return nil
}

var _ startstop.Service = (*svc)(nil)

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestStartThenStopEndsTheGoroutinesWithTheStoppingCause(t *testing.T) {
	s := newSvc()
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !closed(s.Started()) || closed(s.Stopped()) {
		t.Fatal("after Start: Started should be closed and Stopped open")
	}
	s.Stop()
	if got := <-s.ended; !errors.Is(got, startstop.ErrStopping) {
		t.Errorf("goroutine's cause = %v, want ErrStopping", got)
	}
	if !closed(s.Stopped()) {
		t.Error("Stopped not closed after Stop")
	}
}

func TestTheStartContextEndingDoesNotStopTheService(t *testing.T) {
	s := newSvc()
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-s.ended:
		t.Fatal("the service stopped when its start context ended")
	default:
	}
	s.Stop()
}

func TestStopIsSafeTwiceConcurrentlyAndWithoutStart(t *testing.T) {
	newSvc().Stop()
	s := newSvc()
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); s.Stop() }()
	}
	wg.Wait()
	s.Stop()
}

func TestAFailedStartLeavesNothingRunningAndCannotBeRestarted(t *testing.T) {
	s := newSvc()
	s.fail = errors.New("boom")
	if err := s.Start(context.Background()); !errors.Is(err, s.fail) {
		t.Fatalf("Start = %v, want boom", err)
	}
	if got := <-s.ended; !errors.Is(got, startstop.ErrStopping) {
		t.Errorf("goroutine's cause = %v", got)
	}
	if closed(s.Started()) || !closed(s.Stopped()) {
		t.Error("a failed start must count as stopped, never started")
	}
	if err := s.Start(context.Background()); !errors.Is(err, startstop.ErrStopped) {
		t.Errorf("Start after a failed start = %v, want ErrStopped", err)
	}
}

func TestASecondStartIsRefused(t *testing.T) {
	s := newSvc()
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if err := s.Start(context.Background()); !errors.Is(err, startstop.ErrStarted) {
		t.Errorf("second Start = %v, want ErrStarted", err)
	}
}

func TestGoAfterStopRunsNothing(t *testing.T) {
	var b startstop.Base
	if _, err := b.StartInit(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.Stop()
	if b.Go(func() { t.Error("ran after Stop") }) {
		t.Error("Go after Stop reported true")
	}
}

func TestWaitStartedSaysStartedStoppedOrDone(t *testing.T) {
	s := newSvc()
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := startstop.WaitStarted(ctx, s); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("before Start: %v, want the context's cause", err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := startstop.WaitStarted(context.Background(), s); err != nil {
		t.Errorf("after Start: %v", err)
	}
	s.Stop()
	f := newSvc()
	f.Stop()
	if err := startstop.WaitStarted(context.Background(), f); !errors.Is(err, startstop.ErrStopped) {
		t.Errorf("after Stop: %v, want ErrStopped", err)
	}
}

func TestStopAllStopsInOrder(t *testing.T) {
	a, b := newSvc(), newSvc()
	for _, s := range []*svc{a, b} {
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	startstop.StopAll(a, b)
	if !closed(a.Stopped()) || !closed(b.Stopped()) {
		t.Error("StopAll left a service running")
	}
}
