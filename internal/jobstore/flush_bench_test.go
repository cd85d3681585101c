package jobstore_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/jobstore"
)

// BenchmarkFlush3000 is one flush of the writer at 10,000 jobs on 1-10 s
// delays: 3,000 ended runs (their events and bus messages) and 3,000
// status rows, through pgx (legacy) and through the flush's own encoder.
// cpu-ms/op is the process's CPU (user and system) per flush, puts
// included, which a loaded machine moves less than the wall time;
// server-ms/op the statements' time in the server, from
// pg_stat_statements (planning included). Not in
// CI (benchmarks run only with -bench):
//
//	go test ./internal/jobstore -run '^$' -bench BenchmarkFlush3000 -benchmem -count 5
func BenchmarkFlush3000(b *testing.B) {
	for _, legacy := range []bool{true, false} {
		name := "encoded"
		if legacy {
			name = "pgx"
		}
		b.Run(name, func(b *testing.B) {
			pool, _ := newPool(b)
			s := jobstore.NewStore(pool, "replica-1", nil)
			if legacy {
				jobstore.SetLegacyFlush(s)
			}
			at := time.Now().Truncate(time.Microsecond)
			seq := int64(0)
			b.ReportAllocs()
			resetStatements(b, pool)
			cpu0 := processCPU(b)
			for b.Loop() {
				for i := range 3000 {
					seq++
					end := at.Add(time.Millisecond)
					id := fmt.Sprintf("job-%05d", i)
					s.PutRun(jobs.Run{Seq: seq, JobID: id, ReplicaID: "replica-1", StartedAt: at, FinishedAt: &end,
						Outcome: jobs.OutcomeSucceeded, NominalAt: at, ScopeKey: "replica-1"})
					s.PutStatus(jobs.Status{JobID: id, Scope: jobs.ScopeInstance, Schedule: "every 5s", Runs: seq,
						LastStartedAt: &at, LastFinishedAt: &end, LastSuccessAt: &end, NextFireAt: &end, LastOutcome: jobs.OutcomeSucceeded, UpdatedAt: end})
				}
				if err := s.Flush(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
			var serverMS float64 // the statements' time in the server (pg_stat_statements)
			if err := pool.QueryRow(b.Context(), `SELECT coalesce(sum(total_exec_time + total_plan_time), 0) FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query NOT LIKE '%pg_stat_statements%'`).Scan(&serverMS); err == nil {
				b.ReportMetric(serverMS/float64(b.N), "server-ms/op")
			}
		})
	}
}

// processCPU is the process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
