#!/usr/bin/env bash
# Issue 28: the designated replica and the cost of a fleet, before and
# after, side by side in one run (docs/benchmarks.md, "Designated replica
# and the cost of a fleet").
#
#  1. Busy: REPLICA_COUNTS real `studioctl run` processes share JOBS
#     installation jobs every 1-2 s (internal/e2e/fleet's TestMeasureFleet):
#     lock attempts per due time, lock statements and all statements per
#     fire, fires against the due times, the database server's CPU.
#  2. Idle: IDLE_COUNTS replicas with no job: statements a minute per
#     replica, connections per replica, the database server's CPU.
#
# Each step runs the binary of BASE (default ef39995, main before the
# designated replica: its tree from `git archive`, nothing checked out)
# and of the work tree, one after the other, in alternating order per
# round; both built without -race. The report is a table per part.
#
# usage: bench/run-fleet.sh
#   BASE=ef39995 ROUNDS=1 WARMUP=15s WINDOW=30s IDLE_WINDOW=30s OUT=dir
#   REPLICA_COUNTS="3 10 30" IDLE_COUNTS="1 3 10 30" JOBS=100 PARTS="busy idle"
#   START_BATCH=5 (replicas started at a time, each batch ready before the next)
#   BUILDS="before after" (the builds to run, e.g. BUILDS=before to retry one)
#
# A measurement; never run by the CI tests (TestMeasureFleet skips unless
# STUDIO_BENCH_FLEET=1, which only this script sets).
set -euo pipefail

base=${BASE:-ef39995}
rounds=${ROUNDS:-1}
warmup=${WARMUP:-15s}
window=${WINDOW:-30s}
idle_window=${IDLE_WINDOW:-30s}
replica_counts=${REPLICA_COUNTS:-3 10 30}
idle_counts=${IDLE_COUNTS:-1 3 10 30}
jobs=${JOBS:-100}
parts=${PARTS:-busy idle}
start_batch=${START_BATCH:-5}
builds=${BUILDS:-before after}
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-${TMPDIR:-/tmp}/studioctl-fleet-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out/base-src"

echo "fleet: results in $out" >&2
# An OUT of an earlier run keeps its builds (REBUILD=1 builds again).
if [[ ! -x $out/studioctl-before || -n ${REBUILD:-} ]]; then
	git -C "$root" archive "$base" | tar -x -C "$out/base-src"
	(cd "$out/base-src" && go build -o "$out/studioctl-before" ./cmd/studioctl)
fi
if [[ ! -x $out/studioctl-after || ! -x $out/fleet.test || -n ${REBUILD:-} ]]; then
	(cd "$root" && go build -o "$out/studioctl-after" ./cmd/studioctl)
	(cd "$root" && go test -c -o "$out/fleet.test" ./internal/e2e/fleet)
fi
{
	echo "date:     $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "before:   $(git -C "$root" rev-parse --short "$base")"
	echo "after:    $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet 2>/dev/null || echo ' (work tree modified)')"
	echo "cpu:      $(nproc) x $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
	echo "settings: rounds=$rounds warmup=$warmup window=$window idle_window=$idle_window replica_counts=\"$replica_counts\" idle_counts=\"$idle_counts\" jobs=$jobs start_batch=$start_batch builds=\"$builds\""
} | tee "$out/machine.txt" >&2

# run NAME BINARY REPLICAS JOBS WINDOW: one TestMeasureFleet, its JSON in NAME.json.
run() {
	local name=$1 bin=$2 n=$3 j=$4 w=$5 before
	before=$(cut -d' ' -f1-3 /proc/loadavg)
	echo "fleet: $name" >&2
	(cd "$root/internal/e2e/fleet" &&
		STUDIO_BENCH_FLEET=1 STUDIO_BENCH_NORACE=1 STUDIO_FLEET_BIN="$bin" STUDIO_BENCH_FLEET_LABEL="$name" \
			STUDIO_BENCH_FLEET_REPLICAS="$n" STUDIO_BENCH_FLEET_JOBS="$j" STUDIO_BENCH_FLEET_WARMUP="$warmup" \
			STUDIO_BENCH_FLEET_WINDOW="$w" STUDIO_BENCH_FLEET_START_BATCH="$start_batch" STUDIO_BENCH_FLEET_OUT="$out/$name.json" \
			"$out/fleet.test" -test.run '^TestMeasureFleet$' -test.count=1 -test.v -test.timeout=30m) >"$out/$name.log" 2>&1 ||
		{ # an overloaded machine: say so, and go on with the next
			echo "$name: FAILED (load average before $before, after $(cut -d' ' -f1-3 /proc/loadavg)): $(grep -m1 -E 'error:|measure_test' "$out/$name.log" | sed 's/^ *//')" | tee -a "$out/load.txt" >&2
			return 0
		}
	echo "$name: load average before $before, after $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load.txt" >&2
}

order() { # the builds, reversed in even rounds
	if ((r % 2 == 0)); then printf '%s\n' $builds | tac | xargs; else echo $builds; fi
}

for r in $(seq 1 "$rounds"); do
	if [[ " $parts " == *" busy "* ]]; then
		for n in $replica_counts; do
			for b in $(order); do run "busy-$n-$b-$r" "$out/studioctl-$b" "$n" "$jobs" "$window"; done
		done
	fi
	if [[ " $parts " == *" idle "* ]]; then
		for n in $idle_counts; do
			for b in $(order); do run "idle-$n-$b-$r" "$out/studioctl-$b" "$n" 0 "$idle_window"; done
		done
	fi
done

# The tables, from the JSON files (medians over the rounds when ROUNDS > 1
# are left to the reader: each round is a row).
{
	echo "| replicas | build | round | attempts per due time | lock statements per fire | statements per fire | fires / due | server CPU per fire | server CPU |"
	echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|"
	for f in "$out"/busy-*.json; do
		[[ -e $f ]] || continue
		n=$(basename "$f" .json | cut -d- -f2) b=$(basename "$f" .json | cut -d- -f3) rr=$(basename "$f" .json | cut -d- -f4)
		jq -r --arg n "$n" --arg b "$b" --arg r "$rr" \
			'"| \($n) | \($b) | \($r) | \(.attempts_per_due*100|round/100) | \(.lock_statements_per_fire*100|round/100) | \(.statements_per_fire*100|round/100) | \(.fires_over_due*1000|round/1000) | \(.db_server_cpu_us_per_fire|round) µs | \(.db_server_cpu_cores*1000|round/1000) cores |"' "$f"
	done | sort -t'|' -k2,2n -k3,3r -k4,4n
	echo
	echo "| replicas | build | round | statements a minute per replica | connections per replica | server CPU | replica CPU each | RSS max |"
	echo "|---:|---|---:|---:|---:|---:|---:|---:|"
	for f in "$out"/idle-*.json; do
		[[ -e $f ]] || continue
		n=$(basename "$f" .json | cut -d- -f2) b=$(basename "$f" .json | cut -d- -f3) rr=$(basename "$f" .json | cut -d- -f4)
		jq -r --arg n "$n" --arg b "$b" --arg r "$rr" \
			'"| \($n) | \($b) | \($r) | \(.statements_per_minute_per_replica*10|round/10) | \(.connections_per_replica*100|round/100) | \(.db_server_cpu_cores*1000|round/1000) cores | \(.replica_cpu_cores_each*1000|round/1000) cores | \(.rss_mib_max*10|round/10) MiB |"' "$f"
	done | sort -t'|' -k2,2n -k3,3r -k4,4n
	echo
	echo "Load average (1, 5, 15 min) around each run:"
	cat "$out/load.txt"
} | tee "$out/report.md"
