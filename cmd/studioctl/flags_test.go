package main

import (
	"context"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/config"
	"github.com/studioctl/studioctl/internal/demo"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
	"github.com/studioctl/studioctl/internal/overdue"
	"github.com/studioctl/studioctl/internal/watch"
)

// Each verb's runF receives the options its flags and arguments filled, so
// these tests see what a command line would do without running it; a bad
// command line is a usage error (exit 2) that names the flag or argument,
// and runF is not reached.

// flagCase is one command line of one verb.
type flagCase struct {
	name  string
	parse func(args ...string) (any, error)
	args  []string
	// want is the options runF receives, their dependencies zeroed
	// (clearDeps); wantErr, when set, is what the usage error names.
	want    any
	wantErr string
}

// clearDeps zeroes the dependencies every options struct embeds, so the
// options compare by the values of their flags and arguments.
func (d *deps) clearDeps() { *d = deps{} }

// flagTestApp is an app for parsing only: no database, a loaded empty
// configuration (replica.listen set, for probe's default).
func flagTestApp() *app {
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }, now: time.Now}
	a.cfg = &config.Config{}
	a.cfg.Replica.Listen = "0.0.0.0:8080"
	return a
}

// verb turns a command constructor into a parse function: it runs the
// command line through cobra, the root's flag error handling and the
// verb's own checks, and returns the options runF received (nil when it
// was not reached).
func verb[O any](newCmd func(*app, func(context.Context, *O) error) *cobra.Command) func(args ...string) (any, error) {
	return func(args ...string) (any, error) {
		a := flagTestApp()
		var got *O
		cmd := newCmd(a, func(_ context.Context, o *O) error { got = o; return nil })
		cmd.SilenceErrors, cmd.SilenceUsage = true, true
		cmd.SetFlagErrorFunc(a.newRootCmd().FlagErrorFunc()) // as under the root
		cmd.SetArgs(args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		err := cmd.ExecuteContext(context.Background())
		if got == nil {
			return nil, err
		}
		zeroDependencies(got)
		return got, err
	}
}

// zeroDependencies clears what an options struct holds besides flag and
// argument values: the embedded deps, function fields, an HTTP client.
func zeroDependencies(o any) {
	if c, ok := o.(interface{ clearDeps() }); ok {
		c.clearDeps()
	}
	v := reflect.ValueOf(o).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if f.CanSet() && (f.Kind() == reflect.Func || f.Type() == reflect.TypeFor[*http.Client]()) {
			f.SetZero()
		}
	}
}

func runFlagCases(t *testing.T, tests []flagCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tt.parse(tt.args...)
			if tt.wantErr != "" {
				if err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("%q: err = %v (exit %d), want a usage error (exit 2) naming %q", tt.args, err, exitCode(err), tt.wantErr)
				}
				if got != nil {
					t.Errorf("%q: runF ran with %+v after a usage error", tt.args, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("%q: %v", tt.args, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("%q: options\n%+v\nwant\n%+v", tt.args, got, tt.want)
			}
		})
	}
}

// defaultWatch is the watch flags when none is given.
var defaultWatch = watchFlags{Poll: watch.DefaultPoll}

func TestJobsVerbsParseTheirFlags(t *testing.T) {
	t.Parallel()
	list, status, history := verb(newJobsListCmd), verb(newJobsStatusCmd), verb(newJobsHistoryCmd)
	pause := verb(func(a *app, f func(context.Context, *jobChangeOptions) error) *cobra.Command {
		return newJobsPauseCmd(a, true, f)
	})
	resume := verb(func(a *app, f func(context.Context, *jobChangeOptions) error) *cobra.Command {
		return newJobsPauseCmd(a, false, f)
	})
	set, trigger, forget := verb(newJobsSetCmd), verb(newJobsTriggerCmd), verb(newJobsForgetCmd)
	out, occ := verb(newJobsOutputCmd), verb(newJobsOccurrencesCmd)
	why, overdueVerb := verb(newJobsWhyCmd), verb(newJobsOverdueCmd)
	diff := verb(newJobsDiffCmd)
	yes, no := true, false
	cronSched, err := jobs.ParseCron("30 3 * * *")
	if err != nil {
		t.Fatal(err)
	}
	scope, empty := "web-2", ""
	since := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	runFlagCases(t, []flagCase{
		{name: "list with no flag", parse: list, want: &jobsStatusOptions{watchFlags: defaultWatch}},
		{name: "list --watch with a poll interval", parse: list, args: []string{"-w", "--watch-poll", "3s"},
			want: &jobsStatusOptions{watchFlags: watchFlags{Watch: true, Poll: 3 * time.Second}}},
		{name: "list takes no argument", parse: list, args: []string{"report"}, wantErr: `unexpected argument "report"`},
		{name: "list --watch-poll must be a duration", parse: list, args: []string{"--watch-poll", "soon"}, wantErr: "--watch-poll"},
		{name: "status without an id is list", parse: status, want: &jobsStatusOptions{watchFlags: defaultWatch}},
		{name: "status of one duty", parse: status, args: []string{"compact@eu-1", "--watch"},
			want: &jobsStatusOptions{ID: "compact@eu-1", watchFlags: watchFlags{Watch: true, Poll: watch.DefaultPoll}}},
		{name: "status takes one id", parse: status, args: []string{"a", "b"}, wantErr: `unexpected argument "b"`},
		{name: "status of a bad id", parse: status, args: []string{"Bad_ID"}, wantErr: "job id"},
		{name: "status of a duty with a bad cluster", parse: status, args: []string{"sync@bad name"}, wantErr: "cluster"},
		{name: "history with the default limit", parse: history, args: []string{"report"}, want: &jobsHistoryOptions{ID: "report", Limit: historyDefaultLimit}},
		{name: "history --limit", parse: history, args: []string{"report", "--limit", "100"}, want: &jobsHistoryOptions{ID: "report", Limit: 100}},
		{name: "history needs an id", parse: history, wantErr: "missing argument ID"},
		{name: "history --limit 0", parse: history, args: []string{"report", "--limit", "0"}, wantErr: "--limit"},
		{name: "history --limit above the maximum", parse: history, args: []string{"report", "--limit", "10001"}, wantErr: "--limit"},
		{name: "history --limit not a number", parse: history, args: []string{"report", "--limit", "many"}, wantErr: `"--limit"`},
		{name: "pause with a reason, unasked", parse: pause, args: []string{"report", "--reason", "incident 4521", "--yes"},
			want: &jobChangeOptions{ID: "report", Reason: "incident 4521", Yes: true, What: "pause", Change: jobstore.Change{Pause: &yes}}},
		{name: "pause for a duration", parse: pause, args: []string{"report", "--reason", "db", "--for", "90m"},
			want: &jobChangeOptions{ID: "report", Reason: "db", What: "pause", Change: jobstore.Change{Pause: &yes, PauseFor: 90 * time.Minute}}},
		{name: "pause until a time", parse: pause, args: []string{"report", "--until", "2026-12-24T01:00:00+01:00"},
			want: &jobChangeOptions{ID: "report", What: "pause", Change: jobstore.Change{Pause: &yes, PauseUntil: time.Date(2026, 12, 24, 0, 0, 0, 0, time.UTC)}}},
		{name: "pause for and until at once", parse: pause, args: []string{"report", "--for", "1h", "--until", "2026-12-24T00:00:00Z"}, wantErr: "--for and --until"},
		{name: "pause for no time", parse: pause, args: []string{"report", "--for", "0s"}, wantErr: "--for: 0s is not positive"},
		{name: "pause for a negative time", parse: pause, args: []string{"report", "--for", "-5m"}, wantErr: "--for: -5m is not positive"},
		{name: "pause for a word", parse: pause, args: []string{"report", "--for", "a while"}, wantErr: "--for: \"a while\" is not a duration"},
		{name: "pause until a date without a time", parse: pause, args: []string{"report", "--until", "2026-12-24"}, wantErr: "--until: \"2026-12-24\" is not a time"},
		{name: "pause of an argument read as a flag", parse: pause, args: []string{"-x-"}, wantErr: "unknown shorthand flag: 'x'"},
		{name: "pause of an id with upper case", parse: pause, args: []string{"Report"}, wantErr: "job id"},
		{name: "resume", parse: resume, args: []string{"report"}, want: &jobChangeOptions{ID: "report", What: "resume", Change: jobstore.Change{Pause: &no}}},
		{name: "resume has no --force", parse: resume, args: []string{"report", "--force"}, wantErr: "unknown flag: --force"},
		{name: "set --every", parse: set, args: []string{"report", "--every", "1h"},
			want: &jobChangeOptions{ID: "report", What: "reschedule", Change: jobstore.Change{Schedule: &jobs.Schedule{Every: time.Hour}}}},
		{name: "set --cron", parse: set, args: []string{"report", "--cron", "30 3 * * *", "--reason", "later"},
			want: &jobChangeOptions{ID: "report", Reason: "later", What: "reschedule", Change: jobstore.Change{Schedule: &cronSched}}},
		{name: "set --clear", parse: set, args: []string{"report", "--clear", "--yes"},
			want: &jobChangeOptions{ID: "report", Yes: true, What: "reschedule", Change: jobstore.Change{Schedule: &jobs.Schedule{}, Zone: ptrTo("")}}},
		{name: "set --tz alone", parse: set, args: []string{"report", "--tz", "Europe/Berlin"},
			want: &jobChangeOptions{ID: "report", What: "reschedule", Change: jobstore.Change{Zone: ptrTo("Europe/Berlin")}}},
		{name: "set --cron with --tz", parse: set, args: []string{"report", "--cron", "30 3 * * *", "--tz", "America/New_York"},
			want: &jobChangeOptions{ID: "report", What: "reschedule", Change: jobstore.Change{Schedule: &cronSched, Zone: ptrTo("America/New_York")}}},
		{name: "set --tz '' goes back to the configured zone", parse: set, args: []string{"report", "--tz", ""},
			want: &jobChangeOptions{ID: "report", What: "reschedule", Change: jobstore.Change{Zone: ptrTo("")}}},
		{name: "set --tz of an unknown zone", parse: set, args: []string{"report", "--tz", "Mars/Olympus"}, wantErr: `--tz: "Mars/Olympus" is not a known time zone`},
		{name: "set --tz of the machine's zone", parse: set, args: []string{"report", "--tz", "Local"}, wantErr: `--tz: "Local"`},
		{name: "set --tz with --clear", parse: set, args: []string{"report", "--clear", "--tz", "UTC"}, wantErr: "--clear already goes back to the configured zone"},
		{name: "set needs one of its three", parse: set, args: []string{"report"}, wantErr: "give exactly one of --every, --cron or --clear"},
		{name: "set takes only one of its three", parse: set, args: []string{"report", "--every", "1h", "--clear"}, wantErr: "give exactly one of --every, --cron or --clear"},
		{name: "set --every not a duration", parse: set, args: []string{"report", "--every", "banana"}, wantErr: `--every: "banana"`},
		{name: "set --every below the minimum", parse: set, args: []string{"report", "--every", "10ms"}, wantErr: "--every: 10ms is shorter"},
		{name: "set --cron that does not parse", parse: set, args: []string{"report", "--cron", "61 * * * *"}, wantErr: "--cron"},
		{name: "set --cron with a time zone", parse: set, args: []string{"report", "--cron", "CRON_TZ=Europe/Paris 0 3 * * *"}, wantErr: "--cron"},
		{name: "trigger", parse: trigger, args: []string{"report", "--reason", "rerun"}, want: &jobChangeOptions{ID: "report", Reason: "rerun", What: "trigger"}},
		{name: "trigger takes one id", parse: trigger, args: []string{"report", "sweep"}, wantErr: `unexpected argument "sweep"`},
		{name: "forget one replica's rows", parse: forget, args: []string{"report", "--replica", "web-2", "--reason", "gone", "--yes"},
			want: &jobsForgetOptions{ID: "report", Replica: "web-2", Reason: "gone", Yes: true}},
		{name: "forget --replica empty", parse: forget, args: []string{"report", "--replica", ""}, wantErr: "--replica"},
		{name: "forget --replica not an id", parse: forget, args: []string{"report", "--replica", "Web 2"}, wantErr: "--replica"},
		{name: "output of the newest run", parse: out, args: []string{"report"}, want: &jobsOutputOptions{ID: "report"}},
		{name: "output of one cluster's run", parse: out, args: []string{"sync@eu-1", "5332"}, want: &jobsOutputOptions{ID: "sync", Cluster: "eu-1", Seq: 5332}},
		{name: "output needs an id", parse: out, wantErr: "missing argument ID"},
		{name: "output SEQ 0", parse: out, args: []string{"report", "0"}, wantErr: `SEQ: "0"`},
		{name: "output SEQ not a number", parse: out, args: []string{"report", "last"}, wantErr: `SEQ: "last"`},
		{name: "output takes two arguments at most", parse: out, args: []string{"report", "1", "2"}, wantErr: `unexpected argument "2"`},
		{name: "output of a duty with a bad cluster", parse: out, args: []string{"sync@bad name"}, wantErr: "job id"},
		{name: "occurrences with the defaults", parse: occ, args: []string{"report"},
			want: &jobsOccurrencesOptions{ID: "report", watchFlags: defaultWatch, Query: jobstore.OccurrenceQuery{Job: "report", Limit: historyDefaultLimit}}},
		{name: "occurrences since a duration, of one scope", parse: occ, args: []string{"report", "--since", "24h", "--scope", "web-2", "--limit", "5"},
			want: &jobsOccurrencesOptions{ID: "report", watchFlags: defaultWatch, Query: jobstore.OccurrenceQuery{Job: "report", SinceAgo: 24 * time.Hour, Scope: &scope, Limit: 5}}},
		{name: "occurrences since a time", parse: occ, args: []string{"report", "--since", "2026-11-30T01:00:00+01:00"},
			want: &jobsOccurrencesOptions{ID: "report", watchFlags: defaultWatch, Query: jobstore.OccurrenceQuery{Job: "report", Since: since, Limit: historyDefaultLimit}}},
		{name: "occurrences --since a negative duration", parse: occ, args: []string{"report", "--since", "-1h"}, wantErr: "--since"},
		{name: "occurrences --since neither", parse: occ, args: []string{"report", "--since", "yesterday"}, wantErr: `--since: "yesterday"`},
		{name: "occurrences --limit 0", parse: occ, args: []string{"report", "--limit", "0"}, wantErr: "--limit"},
		{name: "occurrences of a duty points at --scope", parse: occ, args: []string{"sync@eu-1"}, wantErr: "--scope eu-1"},
		{name: "why of the last due time, in any scope", parse: why, args: []string{"report"}, want: &jobsWhyOptions{ID: "report"}},
		{name: "why at a time with an offset is that time in UTC", parse: why, args: []string{"report", "--at", "2026-11-30T02:00:00+01:00"},
			want: &jobsWhyOptions{ID: "report", At: time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)}},
		{name: "why of one replica's scope", parse: why, args: []string{"report", "--scope", "web-2"}, want: &jobsWhyOptions{ID: "report", Scope: &scope}},
		{name: "why --scope '' is an installation job's scope, not any", parse: why, args: []string{"report", "--scope", ""},
			want: &jobsWhyOptions{ID: "report", Scope: &empty}},
		{name: "why needs an id", parse: why, wantErr: "missing argument ID"},
		{name: "why takes one id", parse: why, args: []string{"report", "sweep"}, wantErr: `unexpected argument "sweep"`},
		{name: "why of a bad id", parse: why, args: []string{"Bad_ID"}, wantErr: "job id"},
		{name: "why of a duty points at --scope", parse: why, args: []string{"sync@eu-1"}, wantErr: "--scope eu-1"},
		{name: "why --at not RFC 3339", parse: why, args: []string{"report", "--at", "yesterday"}, wantErr: `--at: "yesterday"`},
		{name: "why --at without a zone", parse: why, args: []string{"report", "--at", "2026-11-30T02:00:00"}, wantErr: "--at"},
		{name: "overdue with the default grace", parse: overdueVerb, want: &jobsOverdueOptions{Grace: overdue.DefaultGrace}},
		{name: "overdue --grace", parse: overdueVerb, args: []string{"--grace", "5s"}, want: &jobsOverdueOptions{Grace: 5 * time.Second}},
		{name: "overdue --grace 0 is allowed", parse: overdueVerb, args: []string{"--grace", "0s"}, want: &jobsOverdueOptions{}},
		{name: "overdue --grace negative", parse: overdueVerb, args: []string{"--grace", "-1m"}, wantErr: "--grace"},
		{name: "overdue --grace a word", parse: overdueVerb, args: []string{"--grace", "soon"}, wantErr: `--grace: "soon"`},
		{name: "overdue --grace a number without a unit", parse: overdueVerb, args: []string{"--grace", "60"}, wantErr: "--grace"},
		{name: "overdue takes no argument", parse: overdueVerb, args: []string{"report"}, wantErr: `unexpected argument "report"`},
		{name: "diff of one job", parse: diff, args: []string{"report"}, want: &jobsDiffOptions{ID: "report"}},
		{name: "diff needs an id", parse: diff, wantErr: "missing argument ID"},
		{name: "diff takes one id", parse: diff, args: []string{"report", "sweep"}, wantErr: `unexpected argument "sweep"`},
		{name: "diff of a duty's key", parse: diff, args: []string{"sync@eu-1"}, wantErr: `give the job's id`},
	})
}

func TestLocksVerbsParseTheirFlags(t *testing.T) {
	t.Parallel()
	list, show, release := verb(newLocksListCmd), verb(newLocksShowCmd), verb(newLocksReleaseCmd)
	runFlagCases(t, []flagCase{
		{name: "list", parse: list, want: &locksListOptions{watchFlags: defaultWatch}},
		{name: "list --watch", parse: list, args: []string{"--watch"}, want: &locksListOptions{watchFlags: watchFlags{Watch: true, Poll: watch.DefaultPoll}}},
		{name: "list takes no argument", parse: list, args: []string{"sweep"}, wantErr: `unexpected argument "sweep"`},
		{name: "list --bogus", parse: list, args: []string{"--bogus"}, wantErr: "unknown flag: --bogus"},
		{name: "show a name with a space", parse: show, args: []string{"nightly report"}, want: &locksShowOptions{Name: "nightly report"}},
		{name: "show needs a name", parse: show, wantErr: "missing argument NAME"},
		{name: "show an empty name", parse: show, args: []string{""}, wantErr: "lock name"},
		{name: "release with every flag", parse: release, args: []string{"nightly-report", "--force", "--reason", "crashed", "--yes"},
			want: &locksReleaseOptions{Name: "nightly-report", Force: true, Reason: "crashed", Yes: true}},
		{name: "release without --force", parse: release, args: []string{"sweep"}, want: &locksReleaseOptions{Name: "sweep"}},
		{name: "release needs a name", parse: release, wantErr: "missing argument NAME"},
		{name: "release takes one name", parse: release, args: []string{"a", "b"}, wantErr: `unexpected argument "b"`},
		{name: "release --force is a boolean", parse: release, args: []string{"sweep", "--force=maybe"}, wantErr: "--force"},
		{name: "release --reason needs a value", parse: release, args: []string{"sweep", "--reason"}, wantErr: "--reason"},
	})
}

func TestReplicasVerbsParseTheirFlags(t *testing.T) {
	t.Parallel()
	list, drain, forget := verb(newReplicasListCmd), verb(newReplicasDrainCmd), verb(newReplicasForgetCmd)
	runFlagCases(t, []flagCase{
		{name: "list", parse: list, want: &replicasListOptions{watchFlags: defaultWatch}},
		{name: "list takes no argument", parse: list, args: []string{"web-1"}, wantErr: `unexpected argument "web-1"`},
		{name: "drain with the default timeout", parse: drain, args: []string{"web-1"}, want: &replicasDrainOptions{ID: "web-1", Timeout: 2 * time.Minute}},
		{name: "drain with every flag", parse: drain, args: []string{"web-1", "--wait", "--timeout", "30s", "--reason", "kernel", "--yes"},
			want: &replicasDrainOptions{ID: "web-1", Wait: true, Timeout: 30 * time.Second, Reason: "kernel", Yes: true}},
		{name: "drain needs an id", parse: drain, wantErr: "missing argument ID"},
		{name: "drain --timeout 0", parse: drain, args: []string{"web-1", "--timeout", "0s"}, wantErr: "--timeout: must be positive"},
		{name: "drain --timeout not a duration", parse: drain, args: []string{"web-1", "--timeout", "soon"}, wantErr: `"--timeout"`},
		{name: "forget with every flag", parse: forget, args: []string{"web-1", "--force", "--reason", "replaced", "--yes"},
			want: &replicasForgetOptions{ID: "web-1", Force: true, Reason: "replaced", Yes: true}},
		{name: "forget needs an id", parse: forget, wantErr: "missing argument ID"},
		{name: "forget has no --wait", parse: forget, args: []string{"web-1", "--wait"}, wantErr: "unknown flag: --wait"},
	})
}

func TestLeasesVerbsParseTheirFlags(t *testing.T) {
	t.Parallel()
	list, add, remove, release := verb(newLeasesListCmd), verb(newLeasesAddCmd), verb(newLeasesRemoveCmd), verb(newLeasesReleaseCmd)
	runFlagCases(t, []flagCase{
		{name: "list --watch", parse: list, args: []string{"--watch"}, want: &leasesListOptions{watchFlags: watchFlags{Watch: true, Poll: watch.DefaultPoll}}},
		{name: "list takes no argument", parse: list, args: []string{"c1"}, wantErr: `unexpected argument "c1"`},
		{name: "add two clusters", parse: add, args: []string{"a", "b", "--reason", "new"}, want: &leasesAddOptions{Clusters: []string{"a", "b"}, Reason: "new"}},
		{name: "add needs a cluster", parse: add, wantErr: "missing argument CLUSTER"},
		{name: "add an empty name", parse: add, args: []string{"c8", ""}, wantErr: "cluster name is empty"},
		{name: "add a name with a space", parse: add, args: []string{"bad name"}, wantErr: `cluster "bad name"`},
		{name: "add a name too long", parse: add, args: []string{strings.Repeat("a", 129)}, wantErr: "is 129 bytes, at most 128"},
		{name: "remove, unasked", parse: remove, args: []string{"a", "--yes"}, want: &leasesRemoveOptions{Clusters: []string{"a"}, Yes: true}},
		{name: "remove has no --force", parse: remove, args: []string{"c1", "--force"}, wantErr: "unknown flag: --force"},
		{name: "remove needs a cluster", parse: remove, wantErr: "missing argument CLUSTER"},
		{name: "release with every flag", parse: release, args: []string{"kafka-eu-1", "--force", "--reason", "stuck", "--yes"},
			want: &leasesReleaseOptions{Cluster: "kafka-eu-1", Force: true, Reason: "stuck", Yes: true}},
		{name: "release takes one cluster", parse: release, args: []string{"c1", "c2"}, wantErr: `unexpected argument "c2"`},
		{name: "release a bad name", parse: release, args: []string{"c;1"}, wantErr: "invalid cluster name"},
	})
}

func TestConfigShowParsesItsFlags(t *testing.T) {
	t.Parallel()
	show := verb(newConfigShowCmd)
	runFlagCases(t, []flagCase{
		{name: "show", parse: show, want: &configShowOptions{}},
		{name: "show --jobs", parse: show, args: []string{"--jobs"}, want: &configShowOptions{Jobs: true}},
		{name: "show takes no argument", parse: show, args: []string{"jobs"}, wantErr: `unexpected argument "jobs"`},
		{name: "show --jobs is a boolean", parse: show, args: []string{"--jobs=all"}, wantErr: "--jobs"},
	})
}

func TestEventsParsesItsFlags(t *testing.T) {
	t.Parallel()
	events := verb(newEventsCmd)
	runFlagCases(t, []flagCase{
		{name: "the defaults: five seconds from the newest", parse: events, want: &eventsOptions{Wait: 5 * time.Second, Since: -1}},
		{name: "follow from the oldest kept, three events", parse: events, args: []string{"-f", "--since", "0", "--count", "3"},
			want: &eventsOptions{Follow: true, Wait: 5 * time.Second, Count: 3, Since: 0}},
		{name: "raw messages for a second", parse: events, args: []string{"--raw", "--wait", "1s"}, want: &eventsOptions{Raw: true, Wait: time.Second, Since: -1}},
		{name: "--wait 0 with --follow", parse: events, args: []string{"--follow", "--wait", "0s"}, want: &eventsOptions{Follow: true, Since: -1}},
		{name: "--count negative", parse: events, args: []string{"--count", "-1"}, wantErr: "--count: must not be negative"},
		{name: "--wait 0 without --follow", parse: events, args: []string{"--wait", "0s"}, wantErr: "--wait: must be positive"},
		{name: "--since negative", parse: events, args: []string{"--since", "-2"}, wantErr: "--since: must be an event id"},
		{name: "--since not a number", parse: events, args: []string{"--since", "last"}, wantErr: `"--since"`},
		{name: "--since with --raw", parse: events, args: []string{"--since", "1", "--raw"}, wantErr: "--since and --raw"},
		{name: "takes no argument", parse: events, args: []string{"job.trigger"}, wantErr: `unexpected argument "job.trigger"`},
	})
}

func TestDoctorAndProbeParseTheirFlags(t *testing.T) {
	t.Parallel()
	doctor, probe := verb(newDoctorCmd), verb(newProbeCmd)
	runFlagCases(t, []flagCase{
		{name: "doctor", parse: doctor, want: &doctorOptions{}},
		{name: "doctor takes no argument", parse: doctor, args: []string{"clock"}, wantErr: `unexpected argument "clock"`},
		{name: "doctor --bogus", parse: doctor, args: []string{"--bogus"}, wantErr: "unknown flag: --bogus"},
		{name: "probe /readyz at replica.listen", parse: probe, want: &probeOptions{Path: "/readyz", Listen: "0.0.0.0:8080"}},
		{name: "probe a path at --listen", parse: probe, args: []string{"/livez", "--listen", "127.0.0.1:8081"}, want: &probeOptions{Path: "/livez", Listen: "127.0.0.1:8081"}},
		{name: "probe a path without its slash", parse: probe, args: []string{"livez"}, wantErr: `PATH "livez" must start with /`},
		{name: "probe takes one path", parse: probe, args: []string{"/a", "/b"}, wantErr: `unexpected argument "/b"`},
		{name: "probe --listen needs a value", parse: probe, args: []string{"--listen"}, wantErr: "--listen"},
	})
}

func TestMigrateEmbeddedVersionAndDemoParseTheirFlags(t *testing.T) {
	t.Parallel()
	up, status := verb(newMigrateUpCmd), verb(newMigrateStatusCmd)
	embStatus, embStop := verb(newEmbeddedStatusCmd), verb(newEmbeddedStopCmd)
	version, demoCmd := verb(newVersionCmd), verb(newDemoCmd)
	runFlagCases(t, []flagCase{
		{name: "migrate up", parse: up, want: &migrateOptions{}},
		{name: "migrate up takes no argument", parse: up, args: []string{"7"}, wantErr: `unexpected argument "7"`},
		{name: "migrate status", parse: status, want: &migrateOptions{}},
		{name: "migrate status has no --force", parse: status, args: []string{"--force"}, wantErr: "unknown flag: --force"},
		{name: "embedded status", parse: embStatus, want: &embeddedOptions{}},
		{name: "embedded status has no --force", parse: embStatus, args: []string{"--force"}, wantErr: "unknown flag: --force"},
		{name: "embedded stop --force", parse: embStop, args: []string{"--force"}, want: &embeddedOptions{Force: true}},
		{name: "embedded stop takes no argument", parse: embStop, args: []string{"now"}, wantErr: `unexpected argument "now"`},
		{name: "version", parse: version, want: &versionOptions{}},
		{name: "version takes no argument", parse: version, args: []string{"long"}, wantErr: `unexpected argument "long"`},
		{name: "demo with the defaults", parse: demoCmd, want: &demoOptions{Replicas: demo.DefaultReplicas, Duration: demo.DefaultDuration.String()}},
		{name: "demo with every flag", parse: demoCmd, args: []string{"--replicas", "5", "--duration", "2m", "--faults", "--keep"},
			want: &demoOptions{Replicas: 5, Duration: "2m", Faults: true, Keep: true}},
		{name: "demo --replicas not a number", parse: demoCmd, args: []string{"--replicas", "many"}, wantErr: `"--replicas"`},
	})
}

// ptrTo is a pointer to v.
func ptrTo[T any](v T) *T { return &v }
