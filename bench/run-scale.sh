#!/usr/bin/env bash
# The larger picture of issue 14, item 4: how the cost of a fire grows with
# the work, side by side with the peers in the same run.
#
#  1. By the number of jobs: one studioctl runner (internal/runner's
#     TestBench10k, the studioctl side of bench/run-10k.sh: instance jobs on
#     1-10 s delays, history on, its own PostgreSQL) and gocron v2 and
#     robfig/cron v3 (bench/peers) with JOB_COUNTS jobs each: client CPU per
#     fire, PostgreSQL server CPU per fire, RSS, lateness p99.
#  2. By the number of replicas sharing installation jobs: REPLICA_COUNTS
#     real `studioctl run` processes of one binary (built without -race)
#     against one PostgreSQL, each hosting the same REPLICA_JOBS
#     installation jobs (internal/e2e/jobs's TestMeasureScaleReplicas): CPU
#     per fire of all replicas and of each, RSS per replica, the database
#     server's CPU and statements per fire; the peers with REPLICA_JOBS jobs
#     run in the same rounds as the reference.
#
# Every program runs ROUNDS times, in alternating order, one at a time; the
# report (bench/scalereport) quotes the medians over the rounds, and the
# load average around each run is kept beside the results.
#
# usage: bench/run-scale.sh
#   ROUNDS=3 WARMUP=10s WINDOW=20s OUT=dir
#   JOB_COUNTS="100 1000 10000" PROGRAMS="studioctl gocron robfig"
#   REPLICA_COUNTS="1 3 10" REPLICA_JOBS=1000
#   PARTS="jobs replicas" (either alone runs one part)
#
# It is a measurement and never runs in the CI tests: the tests it drives
# skip unless STUDIO_BENCH10K=1 / STUDIO_BENCH_SCALE=1, which only this
# script sets.
set -euo pipefail

rounds=${ROUNDS:-3}
warmup=${WARMUP:-10s}
window=${WINDOW:-20s}
job_counts=${JOB_COUNTS:-100 1000 10000}
programs=${PROGRAMS:-studioctl gocron robfig}
replica_counts=${REPLICA_COUNTS:-1 3 10}
replica_jobs=${REPLICA_JOBS:-1000}
parts=${PARTS:-jobs replicas}
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-${TMPDIR:-/tmp}/studioctl-scale-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out/jobs" "$out/replicas"

echo "scale: results in $out" >&2
(cd "$root" && go test -c -o "$out/runner.test" ./internal/runner)
(cd "$root" && go test -c -o "$out/e2ejobs.test" ./internal/e2e/jobs)
(cd "$root/bench/peers" && go build -o "$out/peers10k" .)
(cd "$root" && go build -o "$out/scalereport" ./bench/scalereport)

{
	echo "date:      $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "commit:    $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet 2>/dev/null || echo ' (work tree modified)')"
	echo "cpu:       $(nproc) x $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
	echo "memory:    $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
	echo "kernel:    $(uname -sr)"
	echo "go:        $(go version | cut -d' ' -f3-)"
	pgbin=$(dirname "$(command -v pg_ctl 2>/dev/null || ls -d /usr/lib/postgresql/*/bin/pg_ctl 2>/dev/null | sort -V | tail -1)")
	echo "postgres:  $("$pgbin/postgres" --version 2>/dev/null || echo unknown)"
	echo "settings:  parts=\"$parts\" rounds=$rounds warmup=$warmup window=$window job_counts=\"$job_counts\" programs=\"$programs\" replica_counts=\"$replica_counts\" replica_jobs=$replica_jobs"
} | tee "$out/machine.txt" >&2

# measure NAME CMD...: runs CMD with its output in NAME.log, and keeps the
# load average around it.
measure() {
	local name=$1
	shift
	echo "scale: $name" >&2
	local before
	before=$(cut -d' ' -f1-3 /proc/loadavg)
	"$@" >"$out/$name.log" 2>&1 || { cat "$out/$name.log" >&2; return 1; }
	echo "$name: load average before $before, after $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load.txt" >&2
}

run_studioctl() { # jobs json
	(cd "$root/internal/runner" &&
		STUDIO_BENCH10K=1 STUDIO_BENCH10K_JOBS="$1" STUDIO_BENCH10K_WARMUP="$warmup" \
			STUDIO_BENCH10K_WINDOW="$window" STUDIO_BENCH10K_OUT="$2" \
			"$out/runner.test" -test.run '^TestBench10k$' -test.count=1 -test.v -test.timeout=30m)
}

run_peer() { # program jobs json
	local flags=(-lib "${1%-nosingleton}")
	[[ $1 == *-nosingleton ]] && flags+=(-singleton=false)
	"$out/peers10k" run "${flags[@]}" -jobs "$2" -warmup "$warmup" -window "$window" -out "$3"
}

run_replicas() { # replicas jobs json
	(cd "$root/internal/e2e/jobs" &&
		STUDIO_BENCH_SCALE=1 STUDIO_BENCH_NORACE=1 STUDIO_BENCH_SCALE_REPLICAS="$1" STUDIO_BENCH_SCALE_JOBS="$2" \
			STUDIO_BENCH_SCALE_WARMUP="$warmup" STUDIO_BENCH_SCALE_WINDOW="$window" STUDIO_BENCH_SCALE_OUT="$3" \
			"$out/e2ejobs.test" -test.run '^TestMeasureScaleReplicas$' -test.count=1 -test.v -test.timeout=30m)
}

# in_order WORDS...: the words, reversed in even rounds.
in_order() {
	if ((r % 2 == 0)); then printf '%s\n' "$@" | tac | xargs; else echo "$@"; fi
}

for r in $(seq 1 "$rounds"); do
	if [[ " $parts " == *" jobs "* ]]; then
		for n in $job_counts; do
			for p in $(in_order $programs); do
				if [[ $p == studioctl ]]; then
					measure "jobs/studioctl-$n-$r" run_studioctl "$n" "$out/jobs/studioctl-$n-$r.json"
				else
					measure "jobs/$p-$n-$r" run_peer "$p" "$n" "$out/jobs/$p-$n-$r.json"
				fi
			done
		done
	fi
	if [[ " $parts " == *" replicas "* ]]; then
		steps=()
		for k in $replica_counts; do steps+=("replicas-$k"); done
		for p in $programs; do [[ $p == studioctl ]] || steps+=("$p"); done
		for s in $(in_order "${steps[@]}"); do
			case $s in
			replicas-*) measure "replicas/$s-$r" run_replicas "${s#replicas-}" "$replica_jobs" "$out/replicas/$s-$r.json" ;;
			*) measure "replicas/$s-$replica_jobs-$r" run_peer "$s" "$replica_jobs" "$out/replicas/$s-$replica_jobs-$r.json" ;;
			esac
		done
	fi
done

{
	"$out/scalereport" "$out"
	echo "Load average (1, 5, 15 min) around each run:"
	cat "$out/load.txt"
} | tee "$out/report.md"
