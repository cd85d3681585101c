package jobs_test

import (
	"maps"
	"testing"

	"github.com/studioctl/studioctl/internal/jobs"
)

func TestParseReadsTheEnvOfACommandJob(t *testing.T) {
	t.Parallel()
	yaml := head + "    scope: instance\n    every: 30s\n" + cmd +
		"    env:\n      REPORT_DIR: /srv/reports\n      PGAPPNAME: nightly\n      _DEBUG: \"1\"\n      EMPTY: ''\n"
	got, err := jobs.Parse(configFile, []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"REPORT_DIR": "/srv/reports", "PGAPPNAME": "nightly", "_DEBUG": "1", "EMPTY": ""}
	if !maps.Equal(got[0].Env, want) {
		t.Errorf("Env = %v, want %v", got[0].Env, want)
	}
}

func TestParseRefusesABadEnv(t *testing.T) {
	t.Parallel()
	job := head + "    scope: instance\n    every: 30s\n"
	tests := []struct {
		name, yaml string
		line       int
		field, msg string
	}{
		{"a name with a dash", job + cmd + "    env: {REPORT-DIR: x}\n",
			6, "env.REPORT-DIR", `"REPORT-DIR" is not a variable name: want [A-Za-z_][A-Za-z0-9_]*`},
		{"a name that starts with a digit", job + cmd + "    env:\n      1X: x\n",
			7, "env.1X", `"1X" is not a variable name: want [A-Za-z_][A-Za-z0-9_]*`},
		{"a name with an equals sign", job + cmd + "    env: {\"A=B\": x}\n",
			6, "env.A=B", `"A=B" is not a variable name: want [A-Za-z_][A-Za-z0-9_]*`},
		{"a variable the runner sets", job + cmd + "    env: {STUDIO_JOB_ID: other}\n",
			6, "env.STUDIO_JOB_ID", "is set by the runner for every run"},
		{"a list value", job + cmd + "    env:\n      A: [x]\n",
			7, "env.A", "must be a single value"},
		{"an empty value", job + cmd + "    env:\n      A:\n",
			7, "env.A", "must be a single value"},
		{"a list instead of a mapping", job + cmd + "    env: [A=x]\n",
			6, "env", "must be a mapping of variable name to value, for example {REPORT_DIR: /srv/reports}"},
		{"a value with a NUL", job + cmd + "    env: {A: \"a\\0b\"}\n",
			6, "env.A", "holds a NUL character, which no environment variable can"},
		{"a name given twice", job + cmd + "    env:\n      A: x\n      A: y\n",
			8, "env.A", "given twice"},
		{"env on an sql job", job + "    run: {sql: SELECT 1}\n    env: {A: x}\n",
			6, "env", "applies to run.command only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			checkConfigError(t, tt.yaml, tt.line, "report", tt.field, tt.msg)
		})
	}
}
