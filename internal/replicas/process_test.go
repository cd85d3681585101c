package replicas

import (
	"context"
	"errors"
	"os/exec"
	"testing"
)

// A process that registers with the id of a live row takes it over at once
// only when the row is proved to be of a process that has ended: same
// machine boot and pid namespace (migration 00021's process), same host,
// and a pid no process has. Every other live row is refused as before:
// two live processes with one id never run.
func TestALiveRowOfAnEndedProcessOfThisMachineIsTakenOverAtOnce(t *testing.T) {
	if processKey() == "" {
		t.Fatal("this test needs /proc (boot_id and the pid namespace)")
	}
	ended := exec.Command("true")
	if err := ended.Run(); err != nil {
		t.Fatal(err)
	}
	endedPID := ended.Process.Pid
	alive := exec.Command("sleep", "600")
	if err := alive.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { alive.Process.Kill(); alive.Wait() })
	tests := []struct {
		name     string
		set      string // how the live row differs from the one this process would write
		arg      any
		takeOver bool
	}{
		{"a pid no process has any more", `pid = $2`, endedPID, true},
		{"a pid a live process has", `pid = $2`, alive.Process.Pid, false},
		{"another machine boot or pid namespace", `pid = $2, process = 'other-boot/pid:[4026531836]'`, endedPID, false},
		{"no process recorded (an older studioctl)", `pid = $2, process = NULL`, endedPID, false},
		{"another host", `pid = $2, host = 'elsewhere'`, endedPID, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := setup(t)
			defer e.pool.Close()
			ctx := context.Background()
			first := e.register(t, "web-1", Options{})
			first.Stop() // nothing recorded: the row is live
			if _, err := e.pool.Exec(ctx, `UPDATE studio_replica SET `+tt.set+` WHERE id = $1`, "web-1", tt.arg); err != nil {
				t.Fatal(err)
			}
			second := NewRegistry(e.cfg, e.url, Options{ID: "web-1"})
			defer second.Stop()
			err := second.Register(ctx)
			if !tt.takeOver {
				if !errors.Is(err, ErrLiveDuplicate) {
					t.Fatalf("Register = %v, want ErrLiveDuplicate", err)
				}
				if got := e.incarnation(t, "web-1"); got != first.Incarnation() {
					t.Fatalf("the row's incarnation is %s, want the first process's %s kept", got, first.Incarnation())
				}
				return
			}
			if err != nil {
				t.Fatalf("Register = %v, want the row of the ended process taken over", err)
			}
			if got := e.incarnation(t, "web-1"); got != second.Incarnation() {
				t.Fatalf("the row's incarnation is %s, want the new process's %s", got, second.Incarnation())
			}
			// It ended without a recorded stop: doctor counts it.
			if r := second.Restarted(); !r.Crashed || r.Incarnation != first.Incarnation() {
				t.Errorf("Restarted() = %+v, want the end of %s recorded", r, first.Incarnation())
			}
		})
	}
}
