package main

import (
	"testing"
	"time"
)

func TestJobsBackfillParsesItsFlags(t *testing.T) {
	bf := verb(newJobsBackfillCmd)
	from, to := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)
	rng := []string{"--from", "2026-11-30T00:00:00Z", "--to", "2026-11-30T04:00:00Z"}
	with := func(args ...string) []string { return append(append([]string{"billing"}, rng...), args...) }
	runFlagCases(t, []flagCase{
		{name: "backfill with the defaults", parse: bf, args: with(),
			want: &jobsBackfillOptions{ID: "billing", From: from, To: to, Max: 100}},
		{name: "backfill with every flag", parse: bf, args: with("--dry-run", "--max", "500", "--reason", "outage", "--again", "--yes"),
			want: &jobsBackfillOptions{ID: "billing", From: from, To: to, Max: 500, DryRun: true, Reason: "outage", Again: true, Yes: true}},
		{name: "backfill times with an offset are those times in UTC", parse: bf,
			args: []string{"billing", "--from", "2026-11-30T01:00:00+01:00", "--to", "2026-11-30T05:00:00+01:00"},
			want: &jobsBackfillOptions{ID: "billing", From: from, To: to, Max: 100}},
		{name: "backfill needs --from", parse: bf, args: []string{"billing", "--to", "2026-11-30T04:00:00Z"}, wantErr: "--from: required"},
		{name: "backfill needs --to", parse: bf, args: []string{"billing", "--from", "2026-11-30T04:00:00Z"}, wantErr: "--to: required"},
		{name: "backfill --from not RFC 3339", parse: bf, args: []string{"billing", "--from", "yesterday", "--to", "2026-11-30T04:00:00Z"}, wantErr: `--from: "yesterday"`},
		{name: "backfill --to without a zone", parse: bf, args: []string{"billing", "--from", "2026-11-30T00:00:00Z", "--to", "2026-11-30T04:00:00"}, wantErr: "--to"},
		{name: "backfill --from after --to", parse: bf, args: []string{"billing", "--from", "2026-11-30T04:00:00Z", "--to", "2026-11-30T00:00:00Z"}, wantErr: "is not before --to"},
		{name: "backfill an empty range", parse: bf, args: []string{"billing", "--from", "2026-11-30T04:00:00Z", "--to", "2026-11-30T04:00:00Z"}, wantErr: "is not before --to"},
		{name: "backfill --max 0", parse: bf, args: with("--max", "0"), wantErr: "--max"},
		{name: "backfill --max past the limit", parse: bf, args: with("--max", "10001"), wantErr: "--max: must be between 1 and 10000"},
		{name: "backfill of a duty", parse: bf, args: append([]string{"sync@eu-1"}, rng...), wantErr: "installation jobs only"},
		{name: "backfill of a bad id", parse: bf, args: append([]string{"Bad_ID"}, rng...), wantErr: "job id"},
		{name: "backfill needs an id", parse: bf, wantErr: "missing argument ID"},
		{name: "backfill takes one id", parse: bf, args: []string{"billing", "sweep"}, wantErr: `unexpected argument "sweep"`},
	})
}
