package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/studioctl/studioctl/internal/config"
)

// noEnv is a getenv that sees nothing, so the XDG/HOME search finds nothing.
func noEnv(string) string { return "" }

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEnvName(t *testing.T) {
	tests := []struct {
		name string
		key  string
		want string
	}{
		{"a top-level key is upper-cased and prefixed", "output", "STUDIO_OUTPUT"},
		{"a dotted key has its dots turned into underscores", "database.url", "STUDIO_DATABASE_URL"},
		{"a key with underscores keeps them", "no_color", "STUDIO_NO_COLOR"},
		{"a deeply nested key is flattened", "locks.columns.lock_until", "STUDIO_LOCKS_COLUMNS_LOCK_UNTIL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := config.EnvName(tt.key); got != tt.want {
				t.Errorf("EnvName(%q) = %q, want %q", tt.key, got, tt.want)
			}
		})
	}
}

func TestKeysAreSortedAndIncludeTheDatabaseURL(t *testing.T) {
	keys := config.Keys()
	for i := 1; i < len(keys); i++ {
		if keys[i-1] >= keys[i] {
			t.Errorf("Keys() not sorted at %d: %q >= %q", i, keys[i-1], keys[i])
		}
	}
	found := false
	for _, k := range keys {
		found = found || k == "database.url"
	}
	if !found {
		t.Errorf("Keys() = %v, missing database.url", keys)
	}
}

func TestLoadWithNothingSetGivesTheDefaults(t *testing.T) {
	t.Chdir(t.TempDir())
	c, _, err := config.Load("", noEnv, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.File != "" {
		t.Errorf("File = %q, want none", c.File)
	}
	if c.Output != "table" || c.Database.Migrate != "on" || c.Database.URL != "" || c.NoColor {
		t.Errorf("defaults wrong: output=%q migrate=%q url=%q no_color=%v", c.Output, c.Database.Migrate, c.Database.URL, c.NoColor)
	}
	if c.Drain.Delay != 5*time.Second {
		t.Errorf("drain.delay = %v, want 5s", c.Drain.Delay)
	}
	if c.Replica.Listen != "127.0.0.1:0" {
		t.Errorf("replica.listen = %q", c.Replica.Listen)
	}
	if c.Locks.Table != "shedlock" || c.Locks.Columns.Name != "name" || c.Locks.Columns.LockUntil != "lock_until" ||
		c.Locks.Columns.LockedAt != "locked_at" || c.Locks.Columns.LockedBy != "locked_by" {
		t.Errorf("locks defaults wrong: %+v", c.Locks)
	}
}

func TestLoadPrecedence(t *testing.T) {
	tests := []struct {
		name    string
		file    string // output in the config file, "" for none
		env     string // STUDIO_OUTPUT, "" for unset
		flag    string // --output, "" for not given
		want    string
		wantURL string
	}{
		{name: "with nothing set the default wins", want: "table"},
		{name: "the config file beats the default", file: "json", want: "json"},
		{name: "the environment beats the config file", file: "json", env: "yaml", want: "yaml"},
		{name: "a flag beats the environment and the config file", file: "json", env: "yaml", flag: "csv", want: "csv"},
		{name: "a flag beats the config file without an environment variable", file: "json", flag: "csv", want: "csv"},
		{name: "an unset flag does not hide the config file", file: "json", want: "json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			path := ""
			if tt.file != "" {
				path = writeFile(t, dir, "custom.yaml", "output: "+tt.file+"\n")
			}
			if tt.env != "" {
				t.Setenv("STUDIO_OUTPUT", tt.env)
			}
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			fs.String("output", "table", "")
			if tt.flag != "" {
				if err := fs.Parse([]string{"--output", tt.flag}); err != nil {
					t.Fatal(err)
				}
			}
			c, v, err := config.Load(path, os.Getenv, []config.FlagBinding{{Key: "output", Flag: fs.Lookup("output")}})
			if err != nil {
				t.Fatal(err)
			}
			if c.Output != tt.want {
				t.Errorf("Output = %q, want %q", c.Output, tt.want)
			}
			if got := v.GetString("output"); got != tt.want {
				t.Errorf("viper output = %q, want %q", got, tt.want)
			}
			if c.File != path {
				t.Errorf("File = %q, want %q", c.File, path)
			}
		})
	}
}

func TestLoadReadsTypedValuesFromTheEnvironment(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("STUDIO_NO_COLOR", "true")
	t.Setenv("STUDIO_DRAIN_DELAY", "250ms")
	t.Setenv("STUDIO_DATABASE_URL", "postgres://env@h/app")
	t.Setenv("STUDIO_LOCKS_COLUMNS_LOCK_UNTIL", "until")
	c, _, err := config.Load("", os.Getenv, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.NoColor {
		t.Error("NoColor = false, want true from STUDIO_NO_COLOR")
	}
	if c.Drain.Delay != 250*time.Millisecond {
		t.Errorf("Drain.Delay = %v, want 250ms", c.Drain.Delay)
	}
	if c.Database.URL != "postgres://env@h/app" {
		t.Errorf("Database.URL = %q", c.Database.URL)
	}
	if c.Locks.Columns.LockUntil != "until" {
		t.Errorf("Locks.Columns.LockUntil = %q", c.Locks.Columns.LockUntil)
	}
}

func TestLoadReadsNestedKeysFromTheFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	path := writeFile(t, dir, "c.yaml", `
database:
  url: postgres://file@h/app
  migrate: "off"
drain:
  delay: 2s
locks:
  table: my_locks
  columns:
    locked_by: owner
jobs:
  anything: [1, 2]
clusters:
  east: {url: x}
`)
	c, _, err := config.Load(path, noEnv, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Database.URL != "postgres://file@h/app" || c.Database.Migrate != "off" {
		t.Errorf("database = %+v", c.Database)
	}
	if c.Drain.Delay != 2*time.Second {
		t.Errorf("Drain.Delay = %v", c.Drain.Delay)
	}
	if c.Locks.Table != "my_locks" || c.Locks.Columns.LockedBy != "owner" || c.Locks.Columns.Name != "name" {
		t.Errorf("locks = %+v", c.Locks)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name      string
		file      string // body of c.yaml; "" means pass a path that does not exist
		env       map[string]string
		wantInMsg []string
	}{
		{
			name:      "an unknown top-level key in the file names the file and the key",
			file:      "outptu: json\n",
			wantInMsg: []string{"c.yaml", `"outptu"`},
		},
		{
			name:      "an unknown nested key in the file names the file and the full key",
			file:      "database:\n  urll: postgres://h/app\n",
			wantInMsg: []string{"c.yaml", `"database.urll"`},
		},
		{
			name:      "a --config that does not exist is an error",
			file:      "",
			wantInMsg: []string{"--config", "missing.yaml"},
		},
		{
			name:      "database.migrate other than on or off in the file is an error",
			file:      "database:\n  migrate: sometimes\n",
			wantInMsg: []string{"database.migrate", "sometimes"},
		},
		{
			name:      "database.migrate other than on or off in the environment is an error",
			file:      "output: json\n",
			env:       map[string]string{"STUDIO_DATABASE_MIGRATE": "maybe"},
			wantInMsg: []string{"database.migrate", "maybe"},
		},
		{
			name:      "a file that is not YAML is an error naming the file",
			file:      "output: [unclosed\n",
			wantInMsg: []string{"c.yaml"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			path := filepath.Join(dir, "missing.yaml")
			if tt.file != "" {
				path = writeFile(t, dir, "c.yaml", tt.file)
			}
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			_, _, err := config.Load(path, os.Getenv, nil)
			if err == nil {
				t.Fatal("Load: want an error")
			}
			var ce *config.Error
			if !errors.As(err, &ce) {
				t.Fatalf("error is %T, want *config.Error: %v", err, err)
			}
			for _, s := range tt.wantInMsg {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestLoadFindsTheConfigFile(t *testing.T) {
	tests := []struct {
		name     string
		local    bool // write ./studio.yaml
		xdg      bool // write $XDG_CONFIG_HOME/studioctl/config.yaml
		home     bool // write $HOME/.config/studioctl/config.yaml (no XDG_CONFIG_HOME)
		want     string
		wantFile string // "local", "xdg", "home" or ""
	}{
		{name: "./studio.yaml is found when no file is given", local: true, want: "json", wantFile: "local"},
		{name: "the XDG config file is found when there is no ./studio.yaml", xdg: true, want: "yaml", wantFile: "xdg"},
		{name: "./studio.yaml is preferred over the XDG config file", local: true, xdg: true, want: "json", wantFile: "local"},
		{name: "$HOME/.config is searched when XDG_CONFIG_HOME is unset", home: true, want: "csv", wantFile: "home"},
		{name: "no file at all is fine", want: "table", wantFile: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			work := filepath.Join(dir, "work")
			if err := os.MkdirAll(work, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Chdir(work)
			xdgDir := filepath.Join(dir, "xdg")
			homeDir := filepath.Join(dir, "home")
			files := map[string]string{"": ""}
			if tt.local {
				writeFile(t, work, "studio.yaml", "output: json\n")
				files["local"] = "studio.yaml"
			}
			if tt.xdg {
				files["xdg"] = writeFile(t, xdgDir, "studioctl/config.yaml", "output: yaml\n")
			}
			if tt.home {
				files["home"] = writeFile(t, homeDir, ".config/studioctl/config.yaml", "output: csv\n")
			}
			getenv := func(k string) string {
				switch {
				case k == "XDG_CONFIG_HOME" && tt.xdg:
					return xdgDir
				case k == "HOME":
					return homeDir
				}
				return ""
			}
			c, _, err := config.Load("", getenv, nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.Output != tt.want {
				t.Errorf("Output = %q, want %q", c.Output, tt.want)
			}
			if c.File != files[tt.wantFile] {
				t.Errorf("File = %q, want %q", c.File, files[tt.wantFile])
			}
		})
	}
}

func TestMaxConnsIsAWholeNumberWithinBounds(t *testing.T) {
	tests := []struct {
		name, file, env string
		want            int
		wantErr         string
	}{
		{name: "unset gives the default", want: config.DefaultMaxConns},
		{name: "a number in the file", file: "16", want: 16},
		{name: "a number in the environment", env: "32", want: 32},
		{name: "the environment wins over the file", file: "16", env: "4", want: 4},
		{name: "below the minimum is refused naming the key", env: "1", wantErr: "database.max_conns (STUDIO_DATABASE_MAX_CONNS): 1 is out of range: want 2 to 1000"},
		{name: "zero is refused", file: "0", wantErr: "0 is out of range"},
		{name: "above the maximum is refused", file: "5000", wantErr: "5000 is out of range"},
		{name: "a word is refused", env: "many", wantErr: `database.max_conns (STUDIO_DATABASE_MAX_CONNS): "many" is not a whole number`},
		{name: "a fraction is refused", file: "2.5", wantErr: "is not a whole number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			path := ""
			if tt.file != "" {
				path = writeFile(t, dir, "c.yaml", "database:\n  max_conns: "+tt.file+"\n")
			}
			if tt.env != "" {
				t.Setenv("STUDIO_DATABASE_MAX_CONNS", tt.env)
			}
			c, _, err := config.Load(path, os.Getenv, nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load: %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Database.MaxConns != tt.want {
				t.Fatalf("max_conns = %d, want %d", c.Database.MaxConns, tt.want)
			}
		})
	}
}

func TestDrainDelayNeedsAUnitAndSaneBounds(t *testing.T) {
	tests := []struct {
		name    string
		file    string // drain.delay as written in the file; "" means not set there
		env     string // STUDIO_DRAIN_DELAY; "" means not set
		want    time.Duration
		wantErr string // "" means no error
	}{
		{name: "unset gives the default 5s", want: 5 * time.Second},
		{name: "0s in the file means no delay", file: "0s", want: 0},
		{name: "0s in the environment means no delay", env: "0s", want: 0},
		{name: "a bare 0 means no delay too", file: "0", want: 0},
		{name: "a bare number in the file is refused, not read as nanoseconds", file: "5", wantErr: `drain.delay (STUDIO_DRAIN_DELAY): "5" has no unit`},
		{name: "a bare number in the environment is refused", env: "5", wantErr: `"5" has no unit`},
		{name: "a fraction without a unit is refused", file: "1.5", wantErr: `"1.5" has no unit`},
		{name: "a negative delay is refused", env: "-1s", wantErr: "drain.delay (STUDIO_DRAIN_DELAY): -1s is negative"},
		{name: "an absurd delay is refused", file: "100h", wantErr: "100h is longer than the maximum 10m0s"},
		{name: "the maximum itself is allowed", env: "10m", want: 10 * time.Minute},
		{name: "a word is refused naming the key", env: "soon", wantErr: `drain.delay (STUDIO_DRAIN_DELAY): "soon" is not a duration`},
		{name: "an empty value in the file is refused", file: `""`, wantErr: "drain.delay (STUDIO_DRAIN_DELAY): is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			path := ""
			if tt.file != "" {
				path = writeFile(t, dir, "c.yaml", "drain:\n  delay: "+tt.file+"\n")
			}
			if tt.env != "" {
				t.Setenv("STUDIO_DRAIN_DELAY", tt.env)
			}
			c, _, err := config.Load(path, os.Getenv, nil)
			if tt.wantErr != "" {
				var ce *config.Error
				if !errors.As(err, &ce) {
					t.Fatalf("Load: error %v (%T), want a *config.Error", err, err)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load: error %q, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Drain.Delay != tt.want {
				t.Errorf("Drain.Delay = %v, want %v", c.Drain.Delay, tt.want)
			}
		})
	}
}

func TestLoadTrimsWhiteSpaceAroundTheDatabaseURL(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("STUDIO_DATABASE_URL", " \tpostgres://app@h/app\n")
	c, _, err := config.Load("", os.Getenv, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Database.URL != "postgres://app@h/app" {
		t.Errorf("Database.URL = %q, want it trimmed", c.Database.URL)
	}
}

// The environment is the one Load is given: a STUDIO_* variable of the
// process that getenv does not show is not read, and one getenv shows is.
func TestLoadReadsOnlyTheGivenEnvironment(t *testing.T) {
	t.Setenv("STUDIO_OUTPUT", "yaml")
	t.Chdir(t.TempDir())
	c, _, err := config.Load("", noEnv, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Output != "table" {
		t.Errorf("Output = %q from the process environment, want the default table", c.Output)
	}
	c, _, err = config.Load("", func(k string) string {
		if k == "STUDIO_OUTPUT" {
			return "json"
		}
		return ""
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Output != "json" {
		t.Errorf("Output = %q, want json from the given environment", c.Output)
	}
}

func TestMetricsPerJobIsAutoOnOrOffWithAWholeNumberLimit(t *testing.T) {
	tests := []struct {
		name, file, env, limitEnv string
		want                      string
		wantLimit                 int
		wantErr                   string
	}{
		{name: "unset gives auto up to the default limit", want: "auto", wantLimit: config.DefaultPerJobLimit},
		{name: "off in the file", file: "per_job: off", want: "off", wantLimit: config.DefaultPerJobLimit},
		{name: "a quoted on in the file", file: `per_job: "on"`, want: "on", wantLimit: config.DefaultPerJobLimit},
		{name: "the environment wins over the file", file: "per_job: off", env: "auto", want: "auto", wantLimit: config.DefaultPerJobLimit},
		{name: "a limit in the file", file: "per_job_limit: 50", want: "auto", wantLimit: 50},
		{name: "a limit in the environment", limitEnv: "20000", want: "auto", wantLimit: 20000},
		{name: "an unknown mode is refused naming the key", env: "sometimes",
			wantErr: `metrics.per_job (STUDIO_METRICS_PER_JOB): "sometimes": want auto, on or off`},
		{name: "a yes in the file is refused", file: "per_job: maybe", wantErr: `metrics.per_job (STUDIO_METRICS_PER_JOB): "maybe": want auto, on or off`},
		{name: "a zero limit is refused", file: "per_job_limit: 0",
			wantErr: "metrics.per_job_limit (STUDIO_METRICS_PER_JOB_LIMIT): 0 is out of range: want 1 to 1000000"},
		{name: "a word for the limit is refused", limitEnv: "lots", wantErr: `metrics.per_job_limit (STUDIO_METRICS_PER_JOB_LIMIT): "lots" is not a whole number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			path := ""
			if tt.file != "" {
				path = writeFile(t, dir, "c.yaml", "metrics:\n  "+tt.file+"\n")
			}
			if tt.env != "" {
				t.Setenv("STUDIO_METRICS_PER_JOB", tt.env)
			}
			if tt.limitEnv != "" {
				t.Setenv("STUDIO_METRICS_PER_JOB_LIMIT", tt.limitEnv)
			}
			c, _, err := config.Load(path, os.Getenv, nil)
			if tt.wantErr != "" {
				var ce *config.Error
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &ce) {
					t.Fatalf("Load: %v, want a config error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Metrics.PerJob != tt.want || c.Metrics.PerJobLimit != tt.wantLimit {
				t.Fatalf("metrics = %q up to %d, want %q up to %d", c.Metrics.PerJob, c.Metrics.PerJobLimit, tt.want, tt.wantLimit)
			}
		})
	}
}

func TestAYAMLSyntaxErrorNamesTheFileAndTheLineThatIsWrong(t *testing.T) {
	tests := []struct {
		name string
		file string
		want string // file:line
	}{
		{"a list item's key indented one space short on line 4", "jobs:\n  - id: a\n    every: 1s\n   command: x\n", "c.yaml:4:"},
		{"a second list item indented short on line 5", "replica:\n  id: x\njobs:\n  - id: a\n   every: 1s\n", "c.yaml:5:"},
		{"a key indented too deep on line 5", "replica:\n  id: x\ndrain:\n delay: 1s\n  x: 2\n", "c.yaml:5:"},
		{"a tab on line 4", "a: 1\nb: 2\nc:\n\t- x\n", "c.yaml:4:"},
		{"an unclosed flow list on line 2", "replica:\n  id: [x\n  listen: y\n", "c.yaml:2:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := writeFile(t, dir, "c.yaml", tt.file)
			_, _, err := config.Load(path, noEnv, nil)
			var ce *config.Error
			if !errors.As(err, &ce) {
				t.Fatalf("Load: got %v, want a *config.Error", err)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "yaml syntax error: ") {
				t.Errorf("error %q: want it to name %q and say yaml syntax error", err, tt.want)
			}
		})
	}
}

// runner.max_concurrent_runs and leases.max_config_clusters: their
// defaults, the file and the environment, and a clear error naming the
// key and its variable.
func TestTheRunAndClusterBoundsAreWholeNumbers(t *testing.T) {
	tests := []struct {
		name, file, runsEnv, clustersEnv string
		wantRuns, wantClusters           int
		wantErr                          string
	}{
		{name: "unset gives the defaults", wantRuns: 8, wantClusters: 1000},
		{name: "the file", file: "runner:\n  max_concurrent_runs: 32\nleases:\n  max_config_clusters: 5000\n", wantRuns: 32, wantClusters: 5000},
		{name: "the environment wins over the file", file: "runner:\n  max_concurrent_runs: 32\n", runsEnv: "4", clustersEnv: "10", wantRuns: 4, wantClusters: 10},
		{name: "a zero cap is refused", runsEnv: "0",
			wantErr: "runner.max_concurrent_runs (STUDIO_RUNNER_MAX_CONCURRENT_RUNS): 0 is out of range: want 1 to 100000"},
		{name: "a word for the cluster bound is refused", clustersEnv: "many",
			wantErr: `leases.max_config_clusters (STUDIO_LEASES_MAX_CONFIG_CLUSTERS): "many" is not a whole number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			path := ""
			if tt.file != "" {
				path = writeFile(t, dir, "c.yaml", tt.file)
			}
			if tt.runsEnv != "" {
				t.Setenv("STUDIO_RUNNER_MAX_CONCURRENT_RUNS", tt.runsEnv)
			}
			if tt.clustersEnv != "" {
				t.Setenv("STUDIO_LEASES_MAX_CONFIG_CLUSTERS", tt.clustersEnv)
			}
			c, _, err := config.Load(path, os.Getenv, nil)
			if tt.wantErr != "" {
				var ce *config.Error
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &ce) {
					t.Fatalf("Load: %v, want a config error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Runner.MaxConcurrentRuns != tt.wantRuns || c.Leases.MaxConfigClusters != tt.wantClusters {
				t.Fatalf("max_concurrent_runs %d, max_config_clusters %d; want %d and %d",
					c.Runner.MaxConcurrentRuns, c.Leases.MaxConfigClusters, tt.wantRuns, tt.wantClusters)
			}
		})
	}
}

// database.sql_as_replica (issue 21, item 3): off unless set, from the file
// or the environment, and a clear error naming the key and its variable.
func TestSQLAsReplicaIsAnExplicitBoolean(t *testing.T) {
	tests := []struct {
		name, file, env string
		want            bool
		wantErr         string
	}{
		{name: "unset is off", want: false},
		{name: "the file turns it on", file: "database:\n  sql_as_replica: true\n", want: true},
		{name: "the environment turns it on", env: "true", want: true},
		{name: "the environment wins over the file", file: "database:\n  sql_as_replica: true\n", env: "false", want: false},
		{name: "a word that is no boolean is refused", env: "sometimes",
			wantErr: `database.sql_as_replica (STUDIO_DATABASE_SQL_AS_REPLICA): "sometimes": want true or false`},
		{name: "a number in the file is refused", file: "database:\n  sql_as_replica: 2\n",
			wantErr: `database.sql_as_replica (STUDIO_DATABASE_SQL_AS_REPLICA): "2": want true or false`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			path := ""
			if tt.file != "" {
				path = writeFile(t, dir, "c.yaml", tt.file)
			}
			getenv := func(k string) string {
				if k == "STUDIO_DATABASE_SQL_AS_REPLICA" {
					return tt.env
				}
				return ""
			}
			c, _, err := config.Load(path, getenv, nil)
			if tt.wantErr != "" {
				var ce *config.Error
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &ce) {
					t.Fatalf("Load: %v, want a config error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Database.SQLAsReplica != tt.want {
				t.Fatalf("SQLAsReplica = %v, want %v", c.Database.SQLAsReplica, tt.want)
			}
		})
	}
}

// The config file is read once (issue 23 item 4): viper's values and the
// sections the jobs: and clusters: parsers take all come from that one
// read. Before, viper read the file itself after Load had checked its
// syntax, and jobs and leases read it twice more.
func TestTheConfigFileIsReadOnceAndEverythingComesFromThatRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "studio.yaml")
	// What is on disk differs from what the one read returns: a second
	// read, by anyone, would see the disk.
	if err := os.WriteFile(path, []byte("output: yaml\nreplica:\n  id: on-disk\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	served := "output: json\nreplica:\n  id: read-once\njobs:\n  - id: a\n    scope: instance\nclusters: [c1, c2]\n"
	reads := 0
	readFile := func(name string) ([]byte, error) {
		reads++
		if name != path {
			t.Errorf("read %q, want %q", name, path)
		}
		return []byte(served), nil
	}
	c, v, err := config.LoadFrom(readFile, path, noEnv, nil)
	if err != nil {
		t.Fatal(err)
	}
	if reads != 1 {
		t.Errorf("the file was read %d times, want once", reads)
	}
	if c.Output != "json" || c.Replica.ID != "read-once" || v.GetString("replica.id") != "read-once" {
		t.Errorf("output %q, replica.id %q (viper %q): want the values of the one read", c.Output, c.Replica.ID, v.GetString("replica.id"))
	}
	if c.Doc == nil || c.Doc.Path != path {
		t.Fatalf("Doc = %+v, want the document of %s", c.Doc, path)
	}
	jobs := c.Doc.Section("jobs")
	if jobs == nil || len(jobs.Content) != 1 || jobs.Line != 5 {
		t.Errorf("jobs: section %+v, want one job from line 5 of the one read", jobs)
	}
	clusters := c.Doc.Section("clusters")
	if clusters == nil || len(clusters.Content) != 2 || clusters.Line != 7 {
		t.Errorf("clusters: section %+v, want two names on line 7", clusters)
	}
	if c.Doc.Section("nothing") != nil {
		t.Error("a section the file does not have is not nil")
	}
	var none *config.Document
	if none.Section("jobs") != nil {
		t.Error("Section on a nil Document (no file) is not nil")
	}
}
