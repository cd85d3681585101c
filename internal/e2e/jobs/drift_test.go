package e2ejobs

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/studioctl/studioctl/internal/testkit/replicaproc"
)

// driftWait bounds each wait for what the replicas published to show in
// the commands; the replicas publish at the start of their runner.
const driftWait = 60 * time.Second

// TestDriftDuringARollingRestartWithTwoConfigs is issue 24's rolling
// deploy (part 7): replica-a runs nightly at every: 30m from the old
// configuration and replica-b at every: 1h from the new one. jobs list
// marks the job drift, jobs diff shows the schedule and the timeout of
// each replica, doctor's config_drift names the job and the replicas, and
// all of it clears once replica-a was restarted with the new
// configuration.
func TestDriftDuringARollingRestartWithTwoConfigs(t *testing.T) {
	t.Parallel()
	nightly := jobConf{ID: "nightly", Scope: "installation", Every: "30m", Run: runConf{Command: []string{"true"}}}
	f := newFixture(t, nightly)
	nightly.Every = "1h"
	nightly.Env = map[string]string{"EXP_DB": f.dbURL, "EXP_DIR": f.dir} // as newFixture sets them
	newConfig := filepath.Join(t.TempDir(), "new.yaml")
	b, err := yaml.Marshal(struct {
		Jobs []jobConf `yaml:"jobs"`
	}{[]jobConf{nightly}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(newConfig, b, 0o644); err != nil {
		t.Fatal(err)
	}
	start := func(id, config string) *replicaproc.Proc {
		return studioctlBin.Start(t, replicaproc.Options{ID: id, DatabaseURL: f.dbURL, Args: []string{"--config", config}, FailOnRace: true})
	}
	a := start("replica-a", f.config)
	rb := start("replica-b", newConfig)
	a.WaitReady(t)
	rb.WaitReady(t)

	wantDiff := []difference{
		{"replica-a", "schedule", "every 30m"}, {"replica-b", "schedule", "every 1h"},
		{"replica-a", "timeout", "1h30m"}, {"replica-b", "timeout", "3h"},
	}
	replicaproc.Eventually(t, driftWait, "jobs diff to show both replicas' schedules", func() error {
		return f.expectDiff(wantDiff)
	})
	if err := f.expectListDrift(true); err != nil {
		t.Fatal(err)
	}
	if err := f.expectDoctorDrift("warn", "nightly: schedule, timeout differ between replica-a, replica-b"); err != nil {
		t.Fatal(err)
	}

	// The rolling restart: replica-a stops and comes back with the new
	// configuration.
	a.Signal(t, syscall.SIGTERM)
	if code := a.WaitExit(t, replicaproc.ExitTimeout); code != 0 {
		t.Fatalf("replica-a exited %d after SIGTERM", code)
	}
	a = start("replica-a", newConfig)
	a.WaitReady(t)
	replicaproc.Eventually(t, driftWait, "jobs diff to show no difference", func() error {
		return f.expectDiff(nil)
	})
	if err := f.expectListDrift(false); err != nil {
		t.Fatal(err)
	}
	if err := f.expectDoctorDrift("ok", "the live replicas agree"); err != nil {
		t.Fatal(err)
	}
}

// difference is one element of jobs diff -o json.
type difference struct {
	ReplicaID string `json:"replica_id"`
	Field     string `json:"field"`
	Value     string `json:"value"`
}

func (f *fixture) expectDiff(want []difference) error {
	out, errOut, code := studioctlBin.Run(f.t, f.dbURL, "jobs", "diff", "nightly", "-o", "json")
	if code != 0 {
		return fmt.Errorf("jobs diff exited %d: %s", code, errOut)
	}
	var got []difference
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		return fmt.Errorf("jobs diff -o json: %v: %s", err, out)
	}
	if want == nil && (got == nil || len(got) != 0) {
		return fmt.Errorf("jobs diff -o json = %q, want []", out)
	}
	if !slices.Equal(got, want) && want != nil {
		return fmt.Errorf("jobs diff -o json = %+v, want %+v", got, want)
	}
	return nil
}

func (f *fixture) expectListDrift(want bool) error {
	out, errOut, code := studioctlBin.Run(f.t, f.dbURL, "jobs", "list", "-o", "json")
	if code != 0 {
		return fmt.Errorf("jobs list exited %d: %s", code, errOut)
	}
	var list []struct {
		ID    string `json:"id"`
		Drift *bool  `json:"drift"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return fmt.Errorf("jobs list -o json: %v: %s", err, out)
	}
	for _, j := range list {
		if j.ID == "nightly" {
			if j.Drift == nil || *j.Drift != want {
				return fmt.Errorf("jobs list -o json: nightly's drift is %v, want %v", j.Drift, want)
			}
			table, _, _ := studioctlBin.Run(f.t, f.dbURL, "jobs", "list")
			if marked := strings.Contains(table, "(drift)"); marked != want {
				return fmt.Errorf("jobs list marks drift: %v, want %v:\n%s", marked, want, table)
			}
			return nil
		}
	}
	return fmt.Errorf("jobs list -o json has no nightly: %s", out)
}

func (f *fixture) expectDoctorDrift(status, detail string) error {
	out, _, _ := studioctlBin.Run(f.t, f.dbURL, "doctor", "-o", "json") // other checks decide the exit code
	var rs []struct {
		Check  string `json:"check"`
		Status string `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		return fmt.Errorf("doctor -o json: %v: %s", err, out)
	}
	for _, r := range rs {
		if r.Check == "config_drift" {
			if r.Status != status || !strings.Contains(r.Detail, detail) {
				return fmt.Errorf("doctor's config_drift: %s %q, want %s with %q", r.Status, r.Detail, status, detail)
			}
			return nil
		}
	}
	return fmt.Errorf("doctor -o json has no config_drift: %s", out)
}
