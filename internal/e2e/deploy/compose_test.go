package e2edeploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// composeFile is the part of compose.ha.yaml the test reads (the x-replica
// anchor is merged into each replica by the YAML decoder).
type composeFile struct {
	Services map[string]struct {
		Image string `yaml:"image"`
		Build struct {
			Context    string `yaml:"context"`
			Dockerfile string `yaml:"dockerfile"`
		} `yaml:"build"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Healthcheck struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
		StopGracePeriod string   `yaml:"stop_grace_period"`
		StopSignal      string   `yaml:"stop_signal"`
		Profiles        []string `yaml:"profiles"`
		Volumes         []string `yaml:"volumes"`
	} `yaml:"services"`
}

// TestComposeReference checks the HA reference against the binary: three
// replicas built from the repository's Containerfile, a healthcheck that
// is the image's own probe of /readyz, a stop grace period that covers
// the drain, flags and environment the binary accepts, its configuration
// file read by the binary, PostgreSQL, and PgBouncer in a profile.
func TestComposeReference(t *testing.T) {
	var f composeFile
	if err := yaml.Unmarshal(readDeploy(t, "compose", "compose.ha.yaml"), &f); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Services["postgres"]; !ok {
		t.Error("no postgres service")
	}
	if pb, ok := f.Services["pgbouncer"]; !ok || len(pb.Profiles) != 1 || pb.Profiles[0] != "pgbouncer" {
		t.Errorf("pgbouncer: want a service in the pgbouncer profile, got %+v", pb.Profiles)
	}
	var replicas int
	ids := map[string]bool{}
	for name, s := range f.Services {
		if !strings.HasPrefix(name, "replica-") {
			continue
		}
		replicas++
		ids[s.Environment["STUDIO_REPLICA_ID"]] = true
		if got := filepath.Join(deployPath("compose"), s.Build.Context, s.Build.Dockerfile); got != filepath.Join(repoRoot, "Containerfile") {
			t.Errorf("%s builds %s, want the repository's Containerfile", name, got)
		}
		if want := "/usr/bin/studioctl probe /readyz"; strings.Join(s.Healthcheck.Test[1:], " ") != want {
			t.Errorf("%s healthcheck %q, want CMD %s", name, s.Healthcheck.Test, want)
		}
		if s.StopSignal != "SIGTERM" {
			t.Errorf("%s stop_signal %q, want SIGTERM (a drain)", name, s.StopSignal)
		}
		grace, err := time.ParseDuration(s.StopGracePeriod)
		if err != nil {
			t.Fatalf("%s stop_grace_period: %v", name, err)
		}
		// The configuration file, as the replicas mount it.
		config := ""
		for _, v := range s.Volumes {
			src, dst, _ := strings.Cut(v, ":")
			if strings.HasPrefix(dst, "/etc/studioctl/studio.yaml") {
				config = filepath.Join(deployPath("compose"), src)
			}
		}
		if _, err := os.Stat(config); err != nil {
			t.Fatalf("%s: its configuration file: %v", name, err)
		}
		env := map[string]string{}
		for k, v := range s.Environment {
			env[k] = v
		}
		delete(env, "PGPASSFILE")
		delay := checkEnv(t, name, env, "--config", config)
		checkGrace(t, name+" stop_grace_period", grace, delay)
		checkArgs(t, name+" command", s.Command)
	}
	if replicas != 3 || len(ids) != 3 {
		t.Errorf("%d replicas with %d distinct ids, want 3 and 3", replicas, len(ids))
	}
}
