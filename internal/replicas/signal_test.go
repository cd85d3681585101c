package replicas

import (
	"context"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/db"
)

// Every state change of the registry's row (registered as starting, ready,
// draining, stopped) and a forget send a replica.state signal, so a watch
// (replicas list --watch) redraws at once; a heartbeat sends nothing.
func TestStateChangesAndForgetSendAReplicaStateSignal(t *testing.T) {
	e := setup(t)
	defer e.pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	conn, err := db.Connect(ctx, e.cfg, e.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+bus.Channel); err != nil {
		t.Fatal(err)
	}
	next := func(what string) bus.Message {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		n, err := waitSkippingEvents(wctx, conn)
		if err != nil {
			t.Fatalf("%s: no notification: %v", what, err)
		}
		m, err := bus.Decode(n.Payload)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return m
	}
	want := bus.Signal(bus.KindReplicaState, "sig")

	r := e.register(t, "sig", Options{HeartbeatEvery: time.Hour})
	if m := next("register"); m.Type != want.Type || m.Kind != want.Kind || m.Key != want.Key {
		t.Fatalf("register sent %+v, want %+v", m, want)
	}
	for _, s := range []State{StateReady, StateDraining, StateStopped} {
		if err := r.SetState(ctx, s); err != nil {
			t.Fatal(err)
		}
		if m := next(string(s)); m.Kind != want.Kind || m.Key != want.Key {
			t.Fatalf("SetState(%s) sent %+v, want %+v", s, m, want)
		}
	}
	if err := r.beat(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := Forget(ctx, e.pool, "sig", "tester", "test"); err != nil {
		t.Fatal(err)
	}
	// The heartbeat sent nothing: the next message is the forget's.
	if m := next("forget"); m.Kind != want.Kind || m.Key != want.Key {
		t.Fatalf("Forget sent %+v, want %+v", m, want)
	}
	wctx, cancel2 := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel2()
	if n, err := waitSkippingEvents(wctx, conn); err == nil {
		t.Fatalf("an extra notification: %s", n.Payload)
	}
}
