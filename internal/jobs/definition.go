package jobs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"strings"
)

// Definition is a job's effective definition as a replica publishes it
// (issue 24 part 7, docs/schedules.md "Drift between replicas"): field
// name to the value shown, after the defaults are applied (the timeout of
// the schedule, the lock name of the id, UTC) and with secrets scrubbed.
// Replicas whose definitions of a job differ have drifted. A field at its
// default of "not set" is left out (DefinitionFields), so adding a field
// changes the digest of no job that does not use it.
type Definition map[string]string

// PublishedDefinition is one job's definition as a replica publishes it
// (internal/jobstore's PublishDefinitions).
type PublishedDefinition struct {
	JobID      string // a per-cluster job's own id, never a duty's key
	Definition Definition
	Builtin    bool // declared in code (studio-housekeeping): not compared
}

// DefinitionField is one field of a definition: its name (the key in the
// published JSON and the FIELD of jobs diff), the value shown when a
// definition leaves it out, and how it is read from a job.
type DefinitionField struct {
	Name string
	// Unset is what jobs diff shows for a definition without the field.
	Unset string
	value func(j Job, scrub func(string) string) string
}

// FieldDefined is the pseudo-field of jobs diff for a job that a live
// replica declares and another does not: "present" or "absent".
const FieldDefined = "defined"

// Values of FieldDefined.
const (
	DefinedPresent = "present"
	DefinedAbsent  = "absent"
)

// DefinitionFields are the fields of a definition, in the order jobs diff
// shows them. To add a field (jitter, deadline: issue 24 parts 2 and 4),
// add a line here that returns "" for the field's default, so that the
// digest of a job that does not use it stays what older replicas publish:
//
//	{Name: "jitter", Unset: "0s", value: func(j Job, _ func(string) string) string {
//		return durationOrEmpty(j.Jitter)
//	}},
var DefinitionFields = []DefinitionField{
	{Name: "scope", value: func(j Job, _ func(string) string) string { return string(j.Scope) }},
	{Name: "clusters", Unset: "-", value: func(j Job, _ func(string) string) string {
		if j.PerCluster {
			return "owned"
		}
		return ""
	}},
	{Name: "schedule", value: func(j Job, _ func(string) string) string {
		body, _ := SplitZone(j.Schedule.String())
		return body
	}},
	{Name: "tz", value: func(j Job, _ func(string) string) string { return j.Schedule.Zone() }},
	{Name: "timeout", value: func(j Job, _ func(string) string) string {
		return FormatDuration(j.TimeoutFor(j.Schedule))
	}},
	{Name: "missed", Unset: string(MissedRunOnce), value: func(j Job, _ func(string) string) string {
		if j.Missed == MissedRunOnce {
			return ""
		}
		return string(j.Missed)
	}},
	{Name: "lock", Unset: "-", value: func(j Job, _ func(string) string) string {
		if j.Scope != ScopeInstallation {
			return ""
		}
		return j.LockName()
	}},
	{Name: "task", value: func(j Job, scrub func(string) string) string { return scrub(taskText(j.Spec)) }},
	// The values of env: and of an http task's headers may be secrets:
	// only their names are published, so a changed value is not drift.
	{Name: "env", Unset: "-", value: func(j Job, _ func(string) string) string { return names(j.Env) }},
	{Name: "headers", Unset: "-", value: func(j Job, _ func(string) string) string {
		if j.Spec.HTTP == nil {
			return ""
		}
		return names(j.Spec.HTTP.Headers)
	}},
	// Hook (issue 24 parts 2 and 4): jitter and deadline go here once
	// jobs.Job has them, each "" at zero.
}

// DefinitionOf is j's definition. scrub hides secrets in the task's text
// (the runner passes db.ScrubText with the replica's own database
// password); nil keeps the text as it is (tests).
func DefinitionOf(j Job, scrub func(string) string) Definition {
	if scrub == nil {
		scrub = func(s string) string { return s }
	}
	d := Definition{}
	for _, f := range DefinitionFields {
		if v := f.value(j, scrub); v != "" {
			d[f.Name] = v
		}
	}
	return d
}

// JSON is d as published: an object with its fields in sorted order
// (encoding/json sorts map keys), the same bytes whatever order the
// fields were set in.
func (d Definition) JSON() string {
	b, err := json.Marshal(map[string]string(d))
	if err != nil { // a map of strings always encodes
		panic(err)
	}
	return string(b)
}

// Digest is a short hash of d's JSON: two replicas publish the same digest
// exactly when they publish the same fields and values.
func (d Definition) Digest() string {
	sum := sha256.Sum256([]byte(d.JSON()))
	return hex.EncodeToString(sum[:16])
}

// Value is field's value as jobs diff shows it: the field's Unset when d
// leaves it out.
func (d Definition) Value(field string) string {
	if v, ok := d[field]; ok {
		return v
	}
	for _, f := range DefinitionFields {
		if f.Name == field {
			return f.Unset
		}
	}
	return ""
}

// FieldNames are the names of DefinitionFields, in their order, then any
// other names in defs (a field a newer replica publishes), sorted.
func FieldNames(defs ...Definition) []string {
	known := map[string]bool{}
	out := make([]string, 0, len(DefinitionFields))
	for _, f := range DefinitionFields {
		out = append(out, f.Name)
		known[f.Name] = true
	}
	var extra []string
	for _, d := range defs {
		for k := range d {
			if !known[k] {
				known[k] = true
				extra = append(extra, k)
			}
		}
	}
	slices.Sort(extra)
	return append(out, extra...)
}

// taskText is a task as shown: "command: ARGV" (each argument quoted when
// it needs it), "sql: TEXT" or "http: METHOD URL". An http body is not
// shown (it may hold a secret).
func taskText(t TaskSpec) string {
	switch t.Kind() {
	case "command":
		args := make([]string, len(t.Command))
		for i, a := range t.Command {
			args[i] = quoteArg(a)
		}
		return "command: " + strings.Join(args, " ")
	case "sql":
		return "sql: " + strings.TrimSpace(t.SQL)
	case "http":
		return "http: " + t.HTTP.Method + " " + t.HTTP.URL
	}
	return ""
}

// quoteArg is a as a shell would read it back: unquoted when it has only
// safe characters, else in single quotes.
func quoteArg(a string) string {
	if a != "" && strings.IndexFunc(a, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,@%+", r))
	}) < 0 {
		return a
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}

// names is m's keys, sorted, joined with ", "; "" when m is empty.
func names(m map[string]string) string {
	return strings.Join(slices.Sorted(maps.Keys(m)), ", ")
}
