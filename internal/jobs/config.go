package jobs

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/studioctl/studioctl/internal/config"
	"github.com/studioctl/studioctl/internal/lockname"
	"github.com/studioctl/studioctl/internal/taskenv"
)

// ConfigError is a job configuration error: it names the file, the line,
// the job and the field. `run` stops with exit 2 before it registers.
type ConfigError struct {
	File  string
	Line  int
	Job   string // "" when the id itself is missing
	Field string
	Msg   string
}

func (e *ConfigError) Error() string {
	job := "job"
	if e.Job != "" {
		job = fmt.Sprintf("job %q", e.Job)
	}
	where := e.File
	if e.Line > 0 {
		where = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Field == "yaml" && e.Job == "" {
		// Not valid YAML: there is no job to name yet.
		return fmt.Sprintf("%s: yaml: %s", where, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s: %s", where, job, e.Field, e.Msg)
}

// Parse reads the jobs: list of YAML document b (named file in errors).
// The binary parses the config file once (config.Load) and hands its
// jobs: section to ParseSection; Parse is for a document on its own.
func Parse(file string, b []byte) ([]Job, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		if line, msg, ok := config.SyntaxLine(b, err); ok {
			return nil, &ConfigError{File: file, Line: line, Field: "yaml", Msg: "syntax error: " + msg}
		}
		return nil, &ConfigError{File: file, Field: "yaml", Msg: err.Error()}
	}
	return ParseSection(file, config.NewDocument(file, &doc).Section("jobs"))
}

// ParseSection reads list, the value of a config file's jobs: key (nil:
// no jobs), as parsed once by config.Load (Config.Doc.Section("jobs")),
// naming file and the node's line in every error.
func ParseSection(file string, list *yaml.Node) ([]Job, error) {
	if list == nil || list.Tag == "!!null" {
		return nil, nil
	}
	if list.Kind != yaml.SequenceNode {
		return nil, &ConfigError{File: file, Line: list.Line, Field: "jobs", Msg: "must be a list of jobs"}
	}
	seen := map[string]int{}
	lockOwner := map[string]Job{HousekeepingID: {ID: HousekeepingID}}
	var out []Job
	for _, n := range list.Content {
		j, err := parseJob(file, n)
		if err != nil {
			return nil, err
		}
		if j.ID == HousekeepingID {
			return nil, &ConfigError{File: file, Line: n.Line, Job: j.ID, Field: "id", Msg: "is the id of a built-in job"}
		}
		if prev, dup := seen[j.ID]; dup {
			return nil, &ConfigError{File: file, Line: n.Line, Job: j.ID, Field: "id", Msg: fmt.Sprintf("duplicate id (first declared on line %d)", prev)}
		}
		seen[j.ID] = n.Line
		if err := claimLock(lockOwner, j); err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

// claimLock records the lock of installation job j in owners, refusing a
// lock that another job already takes: two jobs of one replica on one lock
// would skip each other's ticks as "held elsewhere".
func claimLock(owners map[string]Job, j Job) error {
	if j.Scope != ScopeInstallation {
		return nil
	}
	name := j.LockName()
	if prev, taken := owners[name]; taken {
		field, by := "id", "its id is the lock name"
		if j.Lock != "" {
			field, by = "lock", "named in lock:"
		}
		what := fmt.Sprintf("job %q", prev.ID)
		switch {
		case prev.ID == HousekeepingID && prev.Line == 0:
			what = "the built-in job " + HousekeepingID
		case prev.Line > 0:
			what = fmt.Sprintf("job %q (line %d)", prev.ID, prev.Line)
		}
		return &ConfigError{File: j.File, Line: j.Line, Job: j.ID, Field: field,
			Msg: fmt.Sprintf("lock %q (%s) is already taken by %s; two jobs on one lock would skip each other's ticks", name, by, what)}
	}
	owners[name] = j
	return nil
}

type fields map[string]*yaml.Node

// mapping reads a mapping node, rejecting unknown and repeated keys.
func mapping(file, job, path string, n *yaml.Node, known ...string) (fields, error) {
	if n.Kind != yaml.MappingNode {
		return nil, &ConfigError{File: file, Line: n.Line, Job: job, Field: path, Msg: "must be a mapping"}
	}
	f := fields{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			where := path
			if where == "" {
				where = "jobs"
			}
			return nil, &ConfigError{File: file, Line: k.Line, Job: job, Field: where, Msg: "a key must be a non-empty name, not a list or a mapping"}
		}
		ok := false
		for _, kn := range known {
			ok = ok || kn == k.Value
		}
		field := strings.TrimPrefix(path+"."+k.Value, ".")
		if !ok {
			return nil, &ConfigError{File: file, Line: k.Line, Job: job, Field: field, Msg: fmt.Sprintf("unknown key (known: %s)", strings.Join(known, ", "))}
		}
		if _, dup := f[k.Value]; dup {
			return nil, &ConfigError{File: file, Line: k.Line, Job: job, Field: field, Msg: "given twice"}
		}
		f[k.Value] = n.Content[i+1]
	}
	return f, nil
}

func scalar(file, job, field string, n *yaml.Node) (string, error) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return "", &ConfigError{File: file, Line: n.Line, Job: job, Field: field, Msg: "must be a single value"}
	}
	return n.Value, nil
}

func parseJob(file string, n *yaml.Node) (Job, error) {
	j := Job{File: file, Line: n.Line}
	if n.Kind != yaml.MappingNode {
		return j, &ConfigError{File: file, Line: n.Line, Field: "jobs", Msg: "each job must be a mapping (id, scope, every or cron, run)"}
	}
	// Name the job in every error, even one found before the id is read.
	named := ""
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if v := n.Content[i+1]; n.Content[i].Value == "id" && v.Kind == yaml.ScalarNode && ValidateID(v.Value) == nil {
				named = v.Value
			}
		}
	}
	f, err := mapping(file, named, "", n, "id", "scope", "every", "cron", "timeout", "clusters", "run", "lock", "env", "missed", "catch_up", "tz", "jitter", "deadline")
	if err != nil {
		return j, err
	}
	bad := func(node *yaml.Node, field, format string, args ...any) error {
		line := n.Line
		if node != nil {
			line = node.Line
		}
		return &ConfigError{File: file, Line: line, Job: j.ID, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	idNode, ok := f["id"]
	if !ok {
		return j, bad(nil, "id", "is required")
	}
	if j.ID, err = scalar(file, "", "id", idNode); err != nil {
		return j, err
	}
	if err := ValidateID(j.ID); err != nil {
		j.ID = ""
		return j, bad(idNode, "id", "%s", err.Error())
	}
	scopeNode, ok := f["scope"]
	if !ok {
		return j, bad(nil, "scope", "is required: installation (one replica per tick) or instance (every replica); there is no default")
	}
	scope, err := scalar(file, j.ID, "scope", scopeNode)
	if err != nil {
		return j, err
	}
	switch Scope(scope) {
	case ScopeInstallation, ScopeInstance:
		j.Scope = Scope(scope)
	default:
		return j, bad(scopeNode, "scope", "%q: want installation or instance", scope)
	}
	everyNode, hasEvery := f["every"]
	cronNode, hasCron := f["cron"]
	switch {
	case hasEvery && hasCron:
		return j, bad(cronNode, "cron", "give either every or cron, not both")
	case !hasEvery && !hasCron:
		return j, bad(nil, "every", "a schedule is required: every (fixed delay) or cron")
	case hasEvery:
		v, err := scalar(file, j.ID, "every", everyNode)
		if err != nil {
			return j, err
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return j, bad(everyNode, "every", "%q is not a duration (for example 30s, 5m, 1h)", v)
		}
		if d < MinEvery {
			return j, bad(everyNode, "every", "%s is shorter than the minimum %s", d, MinEvery)
		}
		if d > MaxEvery {
			return j, bad(everyNode, "every", "%s is longer than the maximum %s (use cron for rarer runs)", v, MaxEvery)
		}
		j.Schedule = Schedule{Every: d}
	default:
		v, err := scalar(file, j.ID, "cron", cronNode)
		if err != nil {
			return j, err
		}
		s, err := ParseCron(v)
		if err != nil {
			return j, bad(cronNode, "cron", "%s", strings.TrimPrefix(err.Error(), ErrSchedule.Error()+": "))
		}
		j.Schedule = s
	}
	if zn, ok := f["tz"]; ok {
		v, err := scalar(file, j.ID, "tz", zn)
		if err != nil {
			return j, err
		}
		loc, err := LoadZone(v)
		if err != nil {
			return j, bad(zn, "tz", "%s", err)
		}
		// An every: schedule ignores its zone (docs/schedules.md).
		j.Schedule = j.Schedule.InZone(loc)
	}
	if err := parseJitterDeadline(file, &j, f); err != nil {
		return j, err
	}
	if tn, ok := f["timeout"]; ok {
		v, err := scalar(file, j.ID, "timeout", tn)
		if err != nil {
			return j, err
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return j, bad(tn, "timeout", "%q is not a duration (for example 30s, 10m)", v)
		}
		if d <= 0 {
			return j, bad(tn, "timeout", "must be positive, got %s", d)
		}
		if d < MinTimeout {
			return j, bad(tn, "timeout", "%s is shorter than the minimum %s", v, MinTimeout)
		}
		if d > MaxTimeout {
			return j, bad(tn, "timeout", "%s is longer than the maximum %s", v, MaxTimeout)
		}
		j.Timeout = d
	}
	if cn, ok := f["clusters"]; ok {
		v, _ := scalar(file, j.ID, "clusters", cn)
		if v != "owned" {
			return j, bad(cn, "clusters", "%q: the only value is owned", v)
		}
		// The lease already coordinates per cluster (ADR-0125): a lock on
		// top would make one replica run every cluster's duty.
		if j.Scope != ScopeInstance {
			return j, bad(cn, "clusters", "owned needs scope: instance (the cluster lease already makes one replica run each cluster's duty); this job has scope %s", j.Scope)
		}
		j.PerCluster = true
	}
	if mn, ok := f["missed"]; ok {
		v, err := scalar(file, j.ID, "missed", mn)
		if err != nil {
			return j, err
		}
		if j.Missed, err = ParseMissed(v); err != nil {
			return j, bad(mn, "missed", "%s", err)
		}
		if j.Missed == MissedCatchUp && j.PerCluster {
			// A duty's first run on a new owner is at once, at a nominal
			// time of its own (docs/schedules.md, "Catch-up").
			return j, bad(mn, "missed", "catch-up is not supported with clusters: owned (a duty's first run after its cluster changes owner is at once); use run-once or skip")
		}
	}
	if err := parseCatchUp(file, f, &j, bad); err != nil {
		return j, err
	}
	if ln, ok := f["lock"]; ok {
		v, err := scalar(file, j.ID, "lock", ln)
		if err != nil {
			return j, err
		}
		if j.Scope != ScopeInstallation {
			return j, bad(ln, "lock", "only an installation job takes a lock (this one has scope %s)", j.Scope)
		}
		if err := lockname.Validate(v); err != nil {
			return j, bad(ln, "lock", "%s", strings.TrimPrefix(err.Error(), lockname.ErrInvalid.Error()+": "))
		}
		j.Lock = v
	}
	runNode, ok := f["run"]
	if !ok {
		return j, bad(nil, "run", "is required: command, sql or http")
	}
	if j.Spec, err = parseRun(file, j.ID, runNode); err != nil {
		return j, err
	}
	if en, ok := f["env"]; ok {
		if j.Env, err = parseEnv(file, j.ID, en); err != nil {
			return j, err
		}
		if j.Spec.Kind() != "command" {
			return j, bad(en, "env", "applies to run.command only")
		}
	}
	return j, nil
}

// parseCatchUp reads catch_up: {max: N, within: DURATION}, which a job
// with missed: catch-up needs and any other job must not have.
func parseCatchUp(file string, f fields, j *Job, bad func(*yaml.Node, string, string, ...any) error) error {
	cn, ok := f["catch_up"]
	switch {
	case !ok && j.Missed == MissedCatchUp:
		return bad(f["missed"], "catch_up", "is required with missed: catch-up, for example catch_up: {max: 3, within: 6h}")
	case !ok:
		return nil
	case j.Missed != MissedCatchUp:
		missed := j.Missed
		if missed == "" {
			missed = MissedRunOnce
		}
		return bad(cn, "catch_up", "applies only with missed: catch-up (this job has missed: %s)", missed)
	}
	cf, err := mapping(file, j.ID, "catch_up", cn, "max", "within")
	if err != nil {
		return err
	}
	mn, ok := cf["max"]
	if !ok {
		return bad(cn, "catch_up.max", "is required: the most missed occurrences to run, 1 to %d", MaxCatchUp)
	}
	v, err := scalar(file, j.ID, "catch_up.max", mn)
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxCatchUp {
		return bad(mn, "catch_up.max", "%q: want a whole number from 1 to %d", v, MaxCatchUp)
	}
	wn, ok := cf["within"]
	if !ok {
		return bad(cn, "catch_up.within", "is required: how far back before the start a missed occurrence may lie, for example 6h")
	}
	v, err = scalar(file, j.ID, "catch_up.within", wn)
	if err != nil {
		return err
	}
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return bad(wn, "catch_up.within", "%q is not a duration (for example 30m, 6h)", v)
	case d <= 0:
		return bad(wn, "catch_up.within", "must be positive, got %s", v)
	case d > MaxCatchUpWithin:
		return bad(wn, "catch_up.within", "%s is longer than the maximum %s", v, FormatDuration(MaxCatchUpWithin))
	}
	j.CatchUp = CatchUp{Max: n, Within: d}
	return nil
}

// parseEnv reads a job's env: a mapping of variable name to value, added to
// the clean environment of its command.
func parseEnv(file, job string, n *yaml.Node) (map[string]string, error) {
	bad := func(node *yaml.Node, field, format string, args ...any) error {
		return &ConfigError{File: file, Line: node.Line, Job: job, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if n.Kind != yaml.MappingNode {
		return nil, bad(n, "env", "must be a mapping of variable name to value, for example {REPORT_DIR: /srv/reports}")
	}
	env := map[string]string{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := "env." + k.Value
		switch {
		case !taskenv.ValidName(k.Value):
			return nil, bad(k, field, "%q is not a variable name: want [A-Za-z_][A-Za-z0-9_]*", k.Value)
		case slices.Contains(taskenv.RunEnv, k.Value):
			return nil, bad(k, field, "is set by the runner for every run")
		case v.Kind != yaml.ScalarNode || v.Tag == "!!null":
			return nil, bad(v, field, "must be a single value")
		case strings.ContainsRune(v.Value, 0):
			// exec refuses it at every run; refuse it once, here.
			return nil, bad(v, field, "holds a NUL character, which no environment variable can")
		}
		if _, dup := env[k.Value]; dup {
			return nil, bad(k, field, "given twice")
		}
		env[k.Value] = v.Value
	}
	return env, nil
}

func parseRun(file, job string, n *yaml.Node) (TaskSpec, error) {
	var t TaskSpec
	f, err := mapping(file, job, "run", n, "command", "sql", "http")
	if err != nil {
		return t, err
	}
	if len(f) != 1 {
		return t, &ConfigError{File: file, Line: n.Line, Job: job, Field: "run", Msg: "give exactly one of command, sql or http"}
	}
	bad := func(node *yaml.Node, field, format string, args ...any) error {
		return &ConfigError{File: file, Line: node.Line, Job: job, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if c, ok := f["command"]; ok {
		if c.Kind != yaml.SequenceNode || len(c.Content) == 0 {
			return t, bad(c, "run.command", `must be a non-empty list, for example ["./bin/report", "--day", "yesterday"]`)
		}
		for _, a := range c.Content {
			if a.Kind != yaml.ScalarNode {
				return t, bad(a, "run.command", "every element must be a string")
			}
			t.Command = append(t.Command, a.Value)
		}
		if t.Command[0] == "" {
			return t, bad(c, "run.command", "the program must not be empty")
		}
	}
	if s, ok := f["sql"]; ok {
		v, err := scalar(file, job, "run.sql", s)
		if err != nil {
			return t, err
		}
		if strings.TrimSpace(v) == "" {
			return t, bad(s, "run.sql", "must not be empty")
		}
		t.SQL = v
	}
	if h, ok := f["http"]; ok {
		hf, err := mapping(file, job, "run.http", h, "method", "url", "headers", "body")
		if err != nil {
			return t, err
		}
		ht := HTTPSpec{Method: "POST", Headers: map[string]string{}}
		if m, ok := hf["method"]; ok {
			v, err := scalar(file, job, "run.http.method", m)
			if err != nil {
				return t, err
			}
			switch strings.ToUpper(v) {
			case "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD":
				ht.Method = strings.ToUpper(v)
			default:
				return t, bad(m, "run.http.method", "%q: want GET, POST, PUT, PATCH, DELETE or HEAD", v)
			}
		}
		u, ok := hf["url"]
		if !ok {
			return t, bad(h, "run.http.url", "is required")
		}
		raw, err := scalar(file, job, "run.http.url", u)
		if err != nil {
			return t, err
		}
		pu, perr := url.Parse(raw)
		if perr != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			return t, bad(u, "run.http.url", "%q: want an absolute http:// or https:// URL", raw)
		}
		ht.URL = raw
		if hd, ok := hf["headers"]; ok {
			if hd.Kind != yaml.MappingNode {
				return t, bad(hd, "run.http.headers", "must be a mapping of header to value")
			}
			for i := 0; i+1 < len(hd.Content); i += 2 {
				if hd.Content[i+1].Kind != yaml.ScalarNode {
					return t, bad(hd.Content[i+1], "run.http.headers."+hd.Content[i].Value, "must be a string")
				}
				ht.Headers[hd.Content[i].Value] = hd.Content[i+1].Value
			}
		}
		if b, ok := hf["body"]; ok {
			v, err := scalar(file, job, "run.http.body", b)
			if err != nil {
				return t, err
			}
			ht.Body = v
		}
		t.HTTP = &ht
	}
	return t, nil
}

// parseJitterDeadline reads a job's jitter: and deadline: keys (after its
// schedule and zone) into j.Schedule. A jitter must be shorter than the
// shortest time between two of the schedule's fires (ShortestGap), so a
// shifted cron time never comes after the next cron time.
func parseJitterDeadline(file string, j *Job, f fields) error {
	duration := func(field, example string) (time.Duration, *yaml.Node, bool, error) {
		n, ok := f[field]
		if !ok {
			return 0, nil, false, nil
		}
		v, err := scalar(file, j.ID, field, n)
		if err != nil {
			return 0, n, true, err
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, n, true, &ConfigError{File: file, Line: n.Line, Job: j.ID, Field: field, Msg: fmt.Sprintf("%q is not a duration (for example %s)", v, example)}
		}
		if d < 0 {
			return 0, n, true, &ConfigError{File: file, Line: n.Line, Job: j.ID, Field: field, Msg: fmt.Sprintf("must not be negative, got %s", v)}
		}
		return d, n, true, nil
	}
	bad := func(n *yaml.Node, field, format string, args ...any) error {
		return &ConfigError{File: file, Line: n.Line, Job: j.ID, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	jitter, jn, ok, err := duration("jitter", "30s, 5m")
	if err != nil {
		return err
	}
	if ok && jitter > 0 {
		if jitter > MaxJitter {
			return bad(jn, "jitter", "%s is longer than the maximum %s", jn.Value, MaxJitter)
		}
		if gap := j.Schedule.ShortestGap(); gap > 0 && jitter >= gap {
			what := "every"
			if j.Schedule.IsCron() {
				what = "the shortest time between two cron times"
			}
			return bad(jn, "jitter", "%s is not shorter than %s (%s): a jitter delays each run by less than one period", jn.Value, what, FormatDuration(gap))
		}
		j.Schedule = j.Schedule.WithJitter(jitter)
	}
	deadline, dn, ok, err := duration("deadline", "30s, 10m")
	if err != nil {
		return err
	}
	if ok && deadline > 0 {
		if deadline < MinDeadline {
			return bad(dn, "deadline", "%s is shorter than the minimum %s", dn.Value, MinDeadline)
		}
		if deadline > MaxDeadline {
			return bad(dn, "deadline", "%s is longer than the maximum %s", dn.Value, MaxDeadline)
		}
		j.Schedule = j.Schedule.WithDeadline(deadline)
	}
	return nil
}

// Bounds of the configured durations (MinEvery is in job.go). A fixed delay
// over a year is a typo (cron serves rare runs); a timeout over a day lets a
// hung run keep its job from running for that long; lock times are stored
// in milliseconds.
const (
	MaxEvery   = 366 * 24 * time.Hour
	MinTimeout = time.Millisecond
	MaxTimeout = 24 * time.Hour
)

// IsConfigError reports whether err is a job configuration error.
func IsConfigError(err error) bool {
	var ce *ConfigError
	return errors.As(err, &ce)
}
