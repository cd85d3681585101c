package jobs_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/config"
	"github.com/studioctl/studioctl/internal/jobs"
)

const configFile = "studio.yaml"

const validConfig = `database:
  url: postgres://localhost/studio
jobs:
  - id: nightly-report
    scope: installation
    every: 30s
    timeout: 10m
    run:
      command: ["./bin/report", "--day", "yesterday"]
  - id: session-reaper
    scope: installation
    cron: "0 2 * * *"
    run:
      sql: "DELETE FROM sessions WHERE expires_at < now()"
  - id: cache-refill
    scope: instance
    every: 1m
    run:
      http:
        method: put
        url: http://127.0.0.1:9000/tasks/refill
        headers: {X-Token: abc, Content-Type: application/json}
        body: '{"all":true}'
  - id: ping
    scope: instance
    cron: "@hourly"
    run:
      http: {url: "https://example.com/ping"}
`

func TestParseAcceptsAllThreeTaskKinds(t *testing.T) {
	t.Parallel()
	got, err := jobs.Parse(configFile, []byte(validConfig))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		id       string
		scope    jobs.Scope
		schedule string
		timeout  time.Duration
		line     int
		kind     string
		spec     jobs.TaskSpec
	}{
		{"nightly-report", jobs.ScopeInstallation, "every 30s", 10 * time.Minute, 4, "command",
			jobs.TaskSpec{Command: []string{"./bin/report", "--day", "yesterday"}}},
		{"session-reaper", jobs.ScopeInstallation, "cron 0 2 * * *", 0, 10, "sql",
			jobs.TaskSpec{SQL: "DELETE FROM sessions WHERE expires_at < now()"}},
		{"cache-refill", jobs.ScopeInstance, "every 1m", 0, 15, "http",
			jobs.TaskSpec{HTTP: &jobs.HTTPSpec{Method: "PUT", URL: "http://127.0.0.1:9000/tasks/refill",
				Headers: map[string]string{"X-Token": "abc", "Content-Type": "application/json"}, Body: `{"all":true}`}}},
		{"ping", jobs.ScopeInstance, "cron @hourly", 0, 24, "http",
			jobs.TaskSpec{HTTP: &jobs.HTTPSpec{Method: "POST", URL: "https://example.com/ping", Headers: map[string]string{}}}},
	}
	if len(got) != len(want) {
		t.Fatalf("Parse gave %d jobs, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		j := got[i]
		if j.ID != w.id || j.Scope != w.scope || j.Schedule.String() != w.schedule || j.Timeout != w.timeout ||
			j.File != configFile || j.Line != w.line || j.Builtin {
			t.Errorf("job %d = {ID %q, Scope %q, Schedule %q, Timeout %s, File %q, Line %d, Builtin %v}, want {%q, %q, %q, %s, %q, %d, false}",
				i, j.ID, j.Scope, j.Schedule, j.Timeout, j.File, j.Line, j.Builtin, w.id, w.scope, w.schedule, w.timeout, configFile, w.line)
		}
		if j.Spec.Kind() != w.kind {
			t.Errorf("job %q: task kind %q, want %q", j.ID, j.Spec.Kind(), w.kind)
		}
		if !reflect.DeepEqual(j.Spec, w.spec) {
			t.Errorf("job %q: task %+v (http %+v), want %+v (http %+v)", j.ID, j.Spec, j.Spec.HTTP, w.spec, w.spec.HTTP)
		}
	}
	// The parsed cron is usable at once.
	after := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	if next := got[1].Schedule.Next(after); !next.Equal(time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)) {
		t.Errorf("session-reaper: Next(%s) = %s, want 2026-12-01T02:00:00Z", after, next)
	}
}

func TestParseFindsNoJobsWithoutError(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, yaml string }{
		{"in an empty file", ""},
		{"in a file with only comments", "# nothing here\n"},
		{"in a file without a jobs key", "database:\n  url: postgres://localhost/studio\nreplica:\n  listen: :8080\n"},
		{"under an empty jobs key", "jobs:\n"},
		{"under jobs: null", "jobs: null\n"},
		{"in an empty list", "jobs: []\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := jobs.Parse(configFile, []byte(tt.yaml))
			if err != nil || len(got) != 0 {
				t.Errorf("Parse(%q) = %+v, %v; want no jobs and no error", tt.yaml, got, err)
			}
		})
	}
}

func TestClustersOwnedMakesAPerClusterInstanceJob(t *testing.T) {
	t.Parallel()
	got, err := jobs.Parse(configFile, []byte(head+"    scope: instance\n    every: 30s\n    clusters: owned\n"+cmd))
	if err != nil || len(got) != 1 || !got[0].PerCluster || got[0].Scope != jobs.ScopeInstance {
		t.Fatalf("Parse = %+v, %v; want one per-cluster instance job", got, err)
	}
	got, err = jobs.Parse(configFile, []byte(head+"    scope: instance\n    every: 30s\n"+cmd))
	if err != nil || len(got) != 1 || got[0].PerCluster {
		t.Fatalf("Parse = %+v, %v; want a job that is not per cluster", got, err)
	}
}

// A job as the tests below write it: lines 2 to 5 of the file.
const (
	head = "jobs:\n  - id: report\n"
	cmd  = "    run: {command: [./bin/report]}\n"
)

func TestParseNamesTheFileLineJobAndFieldOfEveryError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		yaml  string
		line  int
		job   string
		field string
		msg   string
	}{
		{"a job without a scope (there is no default)",
			head + "    every: 30s\n" + cmd,
			2, "report", "scope", "is required: installation (one replica per tick) or instance (every replica); there is no default"},
		{"a scope that is neither installation nor instance",
			head + "    scope: cluster\n    every: 30s\n" + cmd,
			3, "report", "scope", `"cluster": want installation or instance`},
		{"an empty scope",
			head + "    scope:\n    every: 30s\n" + cmd,
			3, "report", "scope", "must be a single value"},
		{"both every and cron",
			head + "    scope: instance\n    every: 30s\n    cron: \"0 2 * * *\"\n" + cmd,
			5, "report", "cron", "give either every or cron, not both"},
		{"neither every nor cron",
			head + "    scope: instance\n" + cmd,
			2, "report", "every", "a schedule is required: every (fixed delay) or cron"},
		{"a bad duration",
			head + "    scope: instance\n    every: 30 parsecs\n" + cmd,
			4, "report", "every", `"30 parsecs" is not a duration (for example 30s, 5m, 1h)`},
		{"a duration without a unit",
			head + "    scope: instance\n    every: 30\n" + cmd,
			4, "report", "every", `"30" is not a duration (for example 30s, 5m, 1h)`},
		{"every below one second",
			head + "    scope: instance\n    every: 500ms\n" + cmd,
			4, "report", "every", "500ms is shorter than the minimum 1s"},
		{"a negative every",
			head + "    scope: instance\n    every: -5s\n" + cmd,
			4, "report", "every", "-5s is shorter than the minimum 1s"},
		{"every as a list",
			head + "    scope: instance\n    every: [30s]\n" + cmd,
			4, "report", "every", "must be a single value"},
		{"a cron with a step of zero",
			head + "    scope: instance\n    cron: \"*/0 * * * *\"\n" + cmd,
			4, "report", "cron", `cron "*/0 * * * *": step of range should be a positive number: */0`},
		{"a cron with four fields",
			head + "    scope: instance\n    cron: \"0 2 * *\"\n" + cmd,
			4, "report", "cron", `cron "0 2 * *": expected exactly 5 fields, found 4: [0 2 * *]`},
		{"a cron that never fires",
			head + "    scope: instance\n    cron: \"0 0 30 2 *\"\n" + cmd,
			4, "report", "cron", `cron "0 0 30 2 *" never fires`},
		{"a cron with CRON_TZ",
			head + "    scope: instance\n    cron: \"CRON_TZ=Europe/Paris 0 2 * * *\"\n" + cmd,
			4, "report", "cron", `cron "CRON_TZ=Europe/Paris 0 2 * * *": a time zone prefix is not allowed; give the zone with tz: (config) or --tz (jobs set)`},
		{"an unknown time zone",
			head + "    scope: instance\n    cron: \"0 2 * * *\"\n    tz: Europe/Atlantis\n" + cmd,
			5, "report", "tz", `"Europe/Atlantis" is not a known time zone: want an IANA name such as Europe/Berlin`},
		{"the machine's own zone",
			head + "    scope: instance\n    cron: \"0 2 * * *\"\n    tz: Local\n" + cmd,
			5, "report", "tz", `"Local" is not a time zone every replica shares: want an IANA name such as Europe/Berlin`},
		{"a zone as a list",
			head + "    scope: instance\n    cron: \"0 2 * * *\"\n    tz: [Europe/Berlin]\n" + cmd,
			5, "report", "tz", "must be a single value"},
		{"a negative jitter",
			head + "    scope: instance\n    every: 1h\n    jitter: -5m\n" + cmd,
			5, "report", "jitter", "must not be negative, got -5m"},
		{"a jitter that is not a duration",
			head + "    scope: instance\n    every: 1h\n    jitter: soon\n" + cmd,
			5, "report", "jitter", `"soon" is not a duration (for example 30s, 5m)`},
		{"a jitter as long as every",
			head + "    scope: instance\n    every: 1h\n    jitter: 60m\n" + cmd,
			5, "report", "jitter", "60m is not shorter than every (1h): a jitter delays each run by less than one period"},
		{"a jitter as long as the shortest gap of a cron",
			head + "    scope: instance\n    cron: \"0,10 * * * *\"\n    jitter: 10m\n" + cmd,
			5, "report", "jitter", "10m is not shorter than the shortest time between two cron times (10m): a jitter delays each run by less than one period"},
		{"a jitter as a list",
			head + "    scope: instance\n    every: 1h\n    jitter: [5m]\n" + cmd,
			5, "report", "jitter", "must be a single value"},
		{"a negative deadline",
			head + "    scope: instance\n    every: 1h\n    deadline: -1s\n" + cmd,
			5, "report", "deadline", "must not be negative, got -1s"},
		{"a deadline that is not a duration",
			head + "    scope: instance\n    every: 1h\n    deadline: 5 minutes\n" + cmd,
			5, "report", "deadline", `"5 minutes" is not a duration (for example 30s, 10m)`},
		{"a deadline under a second",
			head + "    scope: instance\n    every: 1h\n    deadline: 500ms\n" + cmd,
			5, "report", "deadline", "500ms is shorter than the minimum 1s"},
		{"a cron with TZ",
			head + "    scope: instance\n    cron: \"TZ=UTC 0 2 * * *\"\n" + cmd,
			4, "report", "cron", `cron "TZ=UTC 0 2 * * *": a time zone prefix is not allowed; give the zone with tz: (config) or --tz (jobs set)`},
		{"an unknown key in run",
			head + "    scope: instance\n    every: 30s\n    run:\n      command: [./bin/report]\n      shell: bash\n",
			7, "report", "run.shell", "unknown key (known: command, sql, http)"},
		{"an unknown key in run.http",
			head + "    scope: instance\n    every: 30s\n    run:\n      http:\n        url: http://localhost/x\n        retries: 3\n",
			8, "report", "run.http.retries", "unknown key (known: method, url, headers, body)"},
		{"a duplicate id, naming the first line",
			head + "    scope: instance\n    every: 30s\n" + cmd + "  - id: report\n    scope: instance\n    every: 1m\n" + cmd,
			6, "report", "id", "duplicate id (first declared on line 2)"},
		{"a job without an id",
			"jobs:\n  - scope: instance\n    every: 30s\n" + cmd,
			2, "", "id", "is required"},
		{"the id of the built-in studio-housekeeping",
			"jobs:\n  - id: studio-housekeeping\n    scope: installation\n    every: 1m\n" + cmd,
			2, "studio-housekeeping", "id", "is the id of a built-in job"},
		{"a job without run",
			head + "    scope: instance\n    every: 30s\n",
			2, "report", "run", "is required: command, sql or http"},
		{"run with two kinds",
			head + "    scope: instance\n    every: 30s\n    run: {command: [./bin/report], sql: \"SELECT 1\"}\n",
			5, "report", "run", "give exactly one of command, sql or http"},
		{"run with no kind",
			head + "    scope: instance\n    every: 30s\n    run: {}\n",
			5, "report", "run", "give exactly one of command, sql or http"},
		{"run as a string",
			head + "    scope: instance\n    every: 30s\n    run: ./bin/report\n",
			5, "report", "run", "must be a mapping"},
		{"an empty command list",
			head + "    scope: instance\n    every: 30s\n    run:\n      command: []\n",
			6, "report", "run.command", `must be a non-empty list, for example ["./bin/report", "--day", "yesterday"]`},
		{"a command as a string",
			head + "    scope: instance\n    every: 30s\n    run:\n      command: ./bin/report --day yesterday\n",
			6, "report", "run.command", `must be a non-empty list, for example ["./bin/report", "--day", "yesterday"]`},
		{"an empty program",
			head + "    scope: instance\n    every: 30s\n    run:\n      command: [\"\", --day]\n",
			6, "report", "run.command", "the program must not be empty"},
		{"an empty sql statement",
			head + "    scope: instance\n    every: 30s\n    run:\n      sql: \"  \"\n",
			6, "report", "run.sql", "must not be empty"},
		{"http without url",
			head + "    scope: instance\n    every: 30s\n    run:\n      http:\n        method: GET\n",
			7, "report", "run.http.url", "is required"},
		{"http with a non-http URL",
			head + "    scope: instance\n    every: 30s\n    run:\n      http:\n        url: ftp://example.com/report\n",
			7, "report", "run.http.url", `"ftp://example.com/report": want an absolute http:// or https:// URL`},
		{"http with a relative URL",
			head + "    scope: instance\n    every: 30s\n    run:\n      http:\n        url: /tasks/report\n",
			7, "report", "run.http.url", `"/tasks/report": want an absolute http:// or https:// URL`},
		{"http with a bad method",
			head + "    scope: instance\n    every: 30s\n    run:\n      http:\n        method: FETCH\n        url: http://localhost/x\n",
			7, "report", "run.http.method", `"FETCH": want GET, POST, PUT, PATCH, DELETE or HEAD`},
		{"http headers as a list",
			head + "    scope: instance\n    every: 30s\n    run:\n      http:\n        url: http://localhost/x\n        headers: [a]\n",
			8, "report", "run.http.headers", "must be a mapping of header to value"},
		{"a timeout of zero",
			head + "    scope: instance\n    every: 30s\n    timeout: 0s\n" + cmd,
			5, "report", "timeout", "must be positive, got 0s"},
		{"a negative timeout",
			head + "    scope: instance\n    every: 30s\n    timeout: -1m\n" + cmd,
			5, "report", "timeout", "must be positive, got -1m0s"},
		{"a timeout that is not a duration",
			head + "    scope: instance\n    every: 30s\n    timeout: ten minutes\n" + cmd,
			5, "report", "timeout", `"ten minutes" is not a duration (for example 30s, 10m)`},
		{"clusters: owned with scope installation",
			head + "    scope: installation\n    every: 30s\n    clusters: owned\n" + cmd,
			5, "report", "clusters", "owned needs scope: instance (the cluster lease already makes one replica run each cluster's duty); this job has scope installation"},
		{"clusters with another value",
			head + "    scope: instance\n    every: 30s\n    clusters: all\n" + cmd,
			5, "report", "clusters", `"all": the only value is owned`},
		{"jobs that are not a list",
			"jobs:\n  report:\n    scope: instance\n",
			2, "", "jobs", "must be a list of jobs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			checkConfigError(t, tt.yaml, tt.line, tt.job, tt.field, tt.msg)
		})
	}
}

// checkConfigError parses yaml and checks the ConfigError and its text.
func checkConfigError(t *testing.T, yaml string, line int, job, field, msg string) {
	t.Helper()
	got, err := jobs.Parse(configFile, []byte(yaml))
	if err == nil {
		t.Fatalf("Parse gave %+v, want an error\n%s", got, yaml)
	}
	var ce *jobs.ConfigError
	if !errors.As(err, &ce) || !jobs.IsConfigError(err) {
		t.Fatalf("Parse error %T %v is not a *ConfigError", err, err)
	}
	want := &jobs.ConfigError{File: configFile, Line: line, Job: job, Field: field, Msg: msg}
	if *ce != *want {
		t.Errorf("Parse error = %#v\nwant %#v\n%s", ce, want, yaml)
	}
	jobPart := "job"
	if job != "" {
		jobPart = `job "` + job + `"`
	}
	text := configFile + ":" + itoa(line) + ": " + jobPart + ": " + field + ": " + msg
	if err.Error() != text {
		t.Errorf("Parse error text = %q\nwant %q", err, text)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestAKeyErrorAtJobLevelNamesTheJob(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml string
		line       int
		field, msg string
	}{
		{"an unknown key", head + "    scope: instance\n    every: 30s\n    retries: 3\n" + cmd,
			5, "retries", "unknown key (known: id, scope, every, cron, timeout, clusters, run, lock, env, missed, catch_up, tz, jitter, deadline)"},
		{"a key given twice", head + "    scope: instance\n    every: 30s\n    every: 1m\n" + cmd,
			5, "every", "given twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := jobs.Parse(configFile, []byte(tt.yaml))
			var ce *jobs.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Parse = %v, want a *ConfigError", err)
			}
			if ce.File != configFile || ce.Line != tt.line || ce.Field != tt.field || ce.Msg != tt.msg {
				t.Fatalf("Parse error = %#v, want line %d, field %q, msg %q", ce, tt.line, tt.field, tt.msg)
			}
			if ce.Job != "report" {
			}
			checkConfigError(t, tt.yaml, tt.line, "report", tt.field, tt.msg)
		})
	}
}

func TestABadIDIsQuotedInTheError(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, id, msg string }{
		{"an upper-case id", "Nightly_Report", "must match [a-z0-9][a-z0-9-]*"},
		{"an id that starts with a hyphen", "-report", "must match [a-z0-9][a-z0-9-]*"},
		{"an id of 65 bytes", strings.Repeat("a", 65), "is 65 bytes, at most 64 allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			yaml := "jobs:\n  - id: \"" + tt.id + "\"\n    scope: instance\n    every: 30s\n" + cmd
			_, err := jobs.Parse(configFile, []byte(yaml))
			var ce *jobs.ConfigError
			if !errors.As(err, &ce) || ce.File != configFile || ce.Line != 2 || ce.Field != "id" || !strings.HasSuffix(ce.Msg, tt.msg) {
				t.Fatalf("Parse = %#v, want a ConfigError on line 2, field id, saying %q", err, tt.msg)
			}
			if !strings.Contains(err.Error(), tt.id) {
			}
			if want := configFile + `:2: job: id: "` + tt.id + `" ` + tt.msg; err.Error() != want {
				t.Errorf("Parse error = %q\nwant %q", err, want)
			}
		})
	}
}

func TestAJobThatIsNotAMappingNamesAField(t *testing.T) {
	t.Parallel()
	_, err := jobs.Parse(configFile, []byte("jobs:\n  - report\n"))
	var ce *jobs.ConfigError
	if !errors.As(err, &ce) || ce.Line != 2 || !strings.Contains(ce.Msg, "must be a mapping") {
		t.Fatalf("Parse = %#v, want a ConfigError on line 2 saying must be a mapping", err)
	}
	if ce.Field == "" {
		t.Errorf("Parse error %q names no field", err)
	}
}

func TestParseAcceptsTheLimits(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, yaml string }{
		{"an id of 64 bytes", "jobs:\n  - id: " + strings.Repeat("a", 64) + "\n    scope: instance\n    every: 30s\n" + cmd},
		{"an id of one digit", "jobs:\n  - id: \"7\"\n    scope: instance\n    every: 30s\n" + cmd},
		{"every of exactly 1s", head + "    scope: instance\n    every: 1s\n" + cmd},
		{"a lower-case http method", head + "    scope: instance\n    every: 30s\n    run: {http: {method: delete, url: \"http://localhost/x\"}}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := jobs.Parse(configFile, []byte(tt.yaml))
			if err != nil || len(got) != 1 {
				t.Fatalf("Parse = %+v, %v; want one job", got, err)
			}
		})
	}
}

func TestParseReportsMalformedYAML(t *testing.T) {
	t.Parallel()
	_, err := jobs.Parse(configFile, []byte("jobs:\n  - id: report\n   scope: [\n"))
	var ce *jobs.ConfigError
	if !errors.As(err, &ce) || ce.File != configFile || ce.Field != "yaml" || !strings.HasPrefix(err.Error(), "studio.yaml:3: yaml: syntax error: ") {
		t.Fatalf("Parse = %v, want a ConfigError of field yaml naming the file", err)
	}
}

// The binary reads the config file once (config.Load) and hands its jobs:
// section to ParseSection: errors name that file and the line.
func TestParseSectionOfTheConfigFileNamesThePathInErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "studio.yaml")
	load := func() ([]jobs.Job, error) {
		t.Helper()
		c, _, err := config.Load(path, func(string) string { return "" }, nil)
		if err != nil {
			t.Fatal(err)
		}
		return jobs.ParseSection(c.File, c.Doc.Section("jobs"))
	}
	if err := os.WriteFile(path, []byte(head+"    every: 30s\n"+cmd), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := load()
	want := path + `:2: job "report": scope: is required: installation (one replica per tick) or instance (every replica); there is no default`
	if err == nil || err.Error() != want {
		t.Errorf("ParseSection = %v, want %q", err, want)
	}

	if err := os.WriteFile(path, []byte(validConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := load()
	if err != nil || len(got) != 4 || got[0].File != path {
		t.Errorf("ParseSection = %+v, %v; want 4 jobs declared in %s", got, err, path)
	}

	if err := os.WriteFile(path, []byte("output: json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := load(); err != nil || got != nil {
		t.Errorf("a file without jobs: ParseSection = %v, %v; want none", got, err)
	}
}

func TestParseNamesTheLineOfAYAMLSyntaxErrorNotWhereItsBlockBegan(t *testing.T) {
	t.Parallel()
	_, err := jobs.Parse("studio.yaml", []byte("jobs:\n  - id: report\n    scope: instance\n   every: 1m\n"))
	var ce *jobs.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("Parse: got %v, want a *ConfigError", err)
	}
	if ce.Line != 4 || ce.Field != "yaml" || !strings.HasPrefix(ce.Msg, "syntax error: ") {
		t.Errorf("got %+v (%v), want line 4, field yaml, a syntax error", *ce, err)
	}
}

func TestTzReadsTheCronInThatZoneAndAnEveryIgnoresIt(t *testing.T) {
	t.Parallel()
	got, err := jobs.Parse("jobs.yaml", []byte(head+"    scope: installation\n    cron: \"30 2 * * *\"\n    tz: Europe/Berlin\n"+cmd+
		"  - id: tick\n    scope: instance\n    every: 1h\n    tz: America/New_York\n"+cmd+
		"  - id: plain\n    scope: instance\n    cron: \"30 2 * * *\"\n"+cmd))
	if err != nil {
		t.Fatal(err)
	}
	if z := got[0].Schedule.Zone(); z != "Europe/Berlin" {
		t.Errorf("report: zone %q", z)
	}
	at := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
	if n := got[0].Schedule.Next(at); !n.Equal(time.Date(2026, 7, 1, 0, 30, 0, 0, time.UTC)) {
		t.Errorf("report: next %s, want 02:30 CEST", n)
	}
	if z, n := got[1].Schedule.Zone(), got[1].Schedule.Next(at); z != "UTC" || !n.Equal(at.Add(time.Hour)) {
		t.Errorf("tick (every 1h with tz): zone %q next %s, want UTC and an hour later", z, n)
	}
	if z := got[2].Schedule.Zone(); z != "UTC" {
		t.Errorf("plain: zone %q, want the default UTC", z)
	}
}
