package jobs_test

import (
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
)

func TestCatchUpIsReadWithItsBounds(t *testing.T) {
	for _, c := range []struct {
		name, scope, sched string
	}{
		{"an installation job every 1h", "installation", "every: 1h"},
		{"an installation cron job", "installation", `cron: "0 * * * *"`},
		{"an instance job", "instance", "every: 10s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			doc := "jobs:\n  - id: billing\n    scope: " + c.scope + "\n    " + c.sched + "\n    missed: catch-up\n    catch_up: {max: 3, within: 6h}\n    run: {command: [\"true\"]}\n"
			list, err := jobs.Parse("s.yaml", []byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			if j := list[0]; j.Missed != jobs.MissedCatchUp || j.CatchUp != (jobs.CatchUp{Max: 3, Within: 6 * time.Hour}) {
				t.Fatalf("got %q %+v; want catch-up, max 3 within 6h", j.Missed, j.CatchUp)
			}
		})
	}
	// The largest bounds are accepted.
	doc := "jobs:\n  - id: a\n    scope: installation\n    every: 1m\n    missed: catch-up\n    catch_up:\n      max: 1000\n      within: 8784h\n    run: {command: [\"true\"]}\n"
	if _, err := jobs.Parse("s.yaml", []byte(doc)); err != nil {
		t.Fatal(err)
	}
}

func TestCatchUpErrorsNameTheJobAndTheField(t *testing.T) {
	head := "jobs:\n  - id: billing\n    scope: installation\n    every: 1h\n"
	run := "    run: {command: [\"true\"]}\n"
	for _, c := range []struct {
		name, body, want string
	}{
		{"catch-up without catch_up", "    missed: catch-up\n",
			`s.yaml:5: job "billing": catch_up: is required with missed: catch-up, for example catch_up: {max: 3, within: 6h}`},
		{"catch_up without missed", "    catch_up: {max: 3, within: 6h}\n",
			`s.yaml:5: job "billing": catch_up: applies only with missed: catch-up (this job has missed: run-once)`},
		{"catch_up with missed: skip", "    missed: skip\n    catch_up: {max: 3, within: 6h}\n",
			`s.yaml:6: job "billing": catch_up: applies only with missed: catch-up (this job has missed: skip)`},
		{"catch_up not a mapping", "    missed: catch-up\n    catch_up: 3\n",
			`s.yaml:6: job "billing": catch_up: must be a mapping`},
		{"an unknown key", "    missed: catch-up\n    catch_up: {max: 3, within: 6h, every: 1h}\n",
			`s.yaml:6: job "billing": catch_up.every: unknown key (known: max, within)`},
		{"max missing", "    missed: catch-up\n    catch_up: {within: 6h}\n",
			`s.yaml:6: job "billing": catch_up.max: is required: the most missed occurrences to run, 1 to 1000`},
		{"max zero", "    missed: catch-up\n    catch_up: {max: 0, within: 6h}\n",
			`s.yaml:6: job "billing": catch_up.max: "0": want a whole number from 1 to 1000`},
		{"max too large", "    missed: catch-up\n    catch_up: {max: 1001, within: 6h}\n",
			`s.yaml:6: job "billing": catch_up.max: "1001": want a whole number from 1 to 1000`},
		{"max not a number", "    missed: catch-up\n    catch_up: {max: all, within: 6h}\n",
			`s.yaml:6: job "billing": catch_up.max: "all": want a whole number from 1 to 1000`},
		{"max a list", "    missed: catch-up\n    catch_up: {max: [3], within: 6h}\n",
			`s.yaml:6: job "billing": catch_up.max: must be a single value`},
		{"within missing", "    missed: catch-up\n    catch_up: {max: 3}\n",
			`s.yaml:6: job "billing": catch_up.within: is required: how far back before the start a missed occurrence may lie, for example 6h`},
		{"within not a duration", "    missed: catch-up\n    catch_up: {max: 3, within: a day}\n",
			`s.yaml:6: job "billing": catch_up.within: "a day" is not a duration (for example 30m, 6h)`},
		{"within zero", "    missed: catch-up\n    catch_up: {max: 3, within: 0s}\n",
			`s.yaml:6: job "billing": catch_up.within: must be positive, got 0s`},
		{"within too long", "    missed: catch-up\n    catch_up: {max: 3, within: 9000h}\n",
			`s.yaml:6: job "billing": catch_up.within: 9000h is longer than the maximum 8784h`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := jobs.Parse("s.yaml", []byte(head+c.body+run))
			if err == nil || err.Error() != c.want || !jobs.IsConfigError(err) {
				t.Fatalf("got %v\nwant %s", err, c.want)
			}
		})
	}
	// A per-cluster duty cannot catch up.
	doc := "jobs:\n  - id: sweep\n    scope: instance\n    every: 1m\n    clusters: owned\n    missed: catch-up\n    catch_up: {max: 3, within: 6h}\n" + run
	_, err := jobs.Parse("s.yaml", []byte(doc))
	want := `s.yaml:6: job "sweep": missed: catch-up is not supported with clusters: owned (a duty's first run after its cluster changes owner is at once); use run-once or skip`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}
