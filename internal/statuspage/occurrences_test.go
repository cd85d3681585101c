package statuspage_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/studioctl/studioctl/internal/statuspage"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// occurrenceRows are two jobs' occurrences relative to database now: one
// skipped while paused 2 h ago and 25 h ago (out of the window), a stretch
// of 12 due times missed while no replica was up, and a run that lost its
// lock; the other job's last due time ran. The DO block lets studio_event
// take the trigger's 'occurrence' event while the schema's CHECK (00006)
// lacks it.
const occurrenceRows = `
DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'studio_event'::regclass AND contype = 'c'
                   AND pg_get_constraintdef(oid) LIKE '%occurrence%') THEN
    ALTER TABLE studio_event DROP CONSTRAINT IF EXISTS studio_event_event_check;
  END IF;
END $$;
INSERT INTO studio_replica (id, incarnation, host, pid, version, state) VALUES ('web-1', gen_random_uuid(), 'h', 1, 'v', 'ready');
INSERT INTO studio_job_status (replica_id, job_id, scope, schedule) VALUES
  ('web-1', 'fresh', 'installation', 'every 1m'), ('web-1', 'steady', 'installation', 'every 1m'), ('web-1', 'quiet', 'installation', 'every 1m');
INSERT INTO studio_occurrence (job_id, nominal_at, outcome, reason, replica_id, paused_by) VALUES
  ('fresh', now() - interval '2 hours', 'skipped', 'paused', 'web-1', 'alice'),
  ('fresh', now() - interval '25 hours', 'skipped', 'paused', 'web-1', 'alice');
INSERT INTO studio_occurrence (job_id, nominal_at, outcome, reason, replica_id, count, last_nominal_at) VALUES
  ('fresh', now() - interval '90 minutes', 'missed', 'down', 'web-1', 12, now() - interval '80 minutes');
INSERT INTO studio_job_run (job_id, replica_id, started_at, finished_at, outcome, nominal_at, scope_key) VALUES
  ('fresh', 'web-1', now() - interval '1 hour', now() - interval '59 minutes', 'lock_lost', now() - interval '1 hour', ''),
  ('steady', 'web-1', now() - interval '1 minute', now() - interval '59 seconds', 'succeeded', now() - interval '1 minute', '');
`

// The page shows each job's last occurrence and its skips and misses of
// the last 24 h, from the model jobs list reads.
func TestPageShowsTheLastOccurrenceAndTheDaysSkipsAndMisses(t *testing.T) {
	t.Parallel()
	pool := testPool(t, pgtest.NewDB(t))
	if _, err := pool.Exec(context.Background(), occurrenceRows); err != nil {
		t.Fatal(err)
	}
	h := statuspage.New(statuspage.Options{DB: pool, ReplicaID: "web-1"})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	body := rec.Body.String()
	if rec.Code != http.StatusOK {
		t.Fatalf("%d\n%s", rec.Code, body)
	}
	row := func(job string) string { return jobRowOf(t, body, job) }
	for job, want := range map[string][]string{
		"fresh":  {`<span class="pill bad">missed/lost</span>`, `<span class="bad" data-occurrences>1 skipped, 13 missed in 24 h</span>`},
		"steady": {`<span class="pill good">ran</span>`},
		"quiet":  {`<span class="dim">none yet</span>`},
	} {
		r := row(job)
		for _, w := range want {
			if !regexp.MustCompile(regexp.QuoteMeta(w)).MatchString(r) {
				t.Errorf("row of %s lacks %s:\n%s", job, w, r)
			}
		}
		if job != "fresh" && regexp.MustCompile(`data-occurrences`).MatchString(r) {
			t.Errorf("row of %s counts skips or misses:\n%s", job, r)
		}
	}
}

// The page says who paused a job, until when and why, and marks a job
// whose live replicas run different definitions, as jobs list does (its
// PAUSED column and "ok (drift)"). Before, it said only "paused" and
// nothing of drift.
func TestPageShowsWhoPausedAJobUntilWhenAndWhyAndItsDrift(t *testing.T) {
	t.Parallel()
	pool := testPool(t, pgtest.NewDB(t))
	if _, err := pool.Exec(context.Background(), `
INSERT INTO studio_replica (id, incarnation, host, pid, version, state) VALUES
  ('web-1', gen_random_uuid(), 'h', 1, 'v', 'ready'), ('web-2', gen_random_uuid(), 'h', 2, 'v', 'ready');
INSERT INTO studio_job_status (replica_id, job_id, scope, schedule, paused) VALUES
  ('web-1', 'held', 'installation', 'every 1m', true), ('web-2', 'held', 'installation', 'every 1m', true),
  ('web-1', 'split', 'installation', 'every 1m', false), ('web-2', 'split', 'installation', 'every 2m', false);
INSERT INTO studio_job_setting (job_id, paused, updated_at, updated_by, paused_by, paused_reason, paused_until) VALUES
  ('held', true, now(), 'alice', 'alice', 'vendor API down <ticket 42>', now() + interval '2 hours');
INSERT INTO studio_job_definition (replica_id, job_id, digest, definition) VALUES
  ('web-1', 'held', 'a', '{}'), ('web-2', 'held', 'a', '{}'),
  ('web-1', 'split', 'a', '{}'), ('web-2', 'split', 'b', '{}');
`); err != nil {
		t.Fatal(err)
	}
	h := statuspage.New(statuspage.Options{DB: pool, ReplicaID: "web-1"})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	body := rec.Body.String()
	if rec.Code != http.StatusOK {
		t.Fatalf("%d\n%s", rec.Code, body)
	}
	row := func(job string) string { return jobRowOf(t, body, job) }
	held, split := row("held"), row("split")
	for _, w := range []string{`paused by alice until <time`, `>in 1h59m`, `: <span title="vendor API down &lt;ticket 42&gt;">vendor API down &lt;ticket 42&gt;</span>`} {
		if !regexp.MustCompile(regexp.QuoteMeta(w)).MatchString(held) {
			t.Errorf("row of held lacks %s:\n%s", w, held)
		}
	}
	if regexp.MustCompile(`data-drift`).MatchString(held) {
		t.Errorf("row of held shows drift, its replicas agree:\n%s", held)
	}
	if !regexp.MustCompile(`data-drift[^>]*studioctl jobs diff split">drift</span>`).MatchString(split) {
		t.Errorf("row of split lacks its drift:\n%s", split)
	}
}

// jobRowOf is job's row of the page's jobs table.
func jobRowOf(t *testing.T, body, job string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<tr data-job="` + job + `">.*?</tr>`).FindString(body)
	if m == "" {
		t.Fatalf("no row of job %s in\n%s", job, body)
	}
	return m
}
