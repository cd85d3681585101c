#!/usr/bin/env bash
# Jobs runner benchmark of issue 4, item 9: one studioctl replica's runner
# hosting 10,000 instance jobs with no-op tasks on 1-10 s fixed delays, and,
# side by side on the same machine, gocron v2 and robfig/cron v3 scheduling
# the same 10,000 no-op jobs in-process. Each program warms up, then measures
# a steady-state window; the three run one after the other, ROUNDS times in
# alternating order, and the report quotes the medians and the
# studioctl/peer ratios of CPU and RSS.
#
# usage: bench/run-10k.sh
#   ROUNDS=2 WARMUP=20s WINDOW=60s JOBS=10000 OUT=dir
#   PROGRAMS="studioctl gocron robfig heap" (heap: a bare timer heap calling
#   the same no-op tasks inline, the floor; add gocron-nosingleton for gocron
#   without WithSingletonMode, which costs it a goroutine and a 1000-slot
#   channel per job)
#   BASE_TEST=path/to/runner.test: also run an older build of the runner
#   side by side (program studioctl-base), to quote a before and an after
#   from one run, e.g. built with
#     git -C REPO worktree add /tmp/base COMMIT && (cd /tmp/base && go test -c -o /tmp/base.test ./internal/runner)
#
# studioctl's side is internal/runner's TestBench10k (inside the main module,
# because it uses internal packages; it starts its own throwaway PostgreSQL
# through pgtest). The peers are bench/peers, a module of their own so the
# product's go.mod never gains gocron.
set -euo pipefail

rounds=${ROUNDS:-2}
warmup=${WARMUP:-20s}
window=${WINDOW:-60s}
jobs=${JOBS:-10000}
programs=${PROGRAMS:-studioctl gocron robfig heap}
base_test=${BASE_TEST:-}
if [[ -n $base_test ]]; then
	base_test=$(cd "$(dirname "$base_test")" && pwd)/$(basename "$base_test")
	programs="studioctl-base $programs"
fi
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-${TMPDIR:-/tmp}/studioctl-bench10k-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"

echo "bench10k: results in $out" >&2
(cd "$root" && go test -c -o "$out/runner.test" ./internal/runner)
(cd "$root/bench/peers" && go build -o "$out/peers10k" .)

{
	echo "date:      $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "commit:    $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet 2>/dev/null || echo ' (work tree modified)')"
	echo "cpu:       $(nproc) x $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
	echo "memory:    $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
	echo "kernel:    $(uname -sr)"
	echo "go:        $(go version | cut -d' ' -f3-)"
	pgbin=$(dirname "$(command -v pg_ctl 2>/dev/null || ls -d /usr/lib/postgresql/*/bin/pg_ctl 2>/dev/null | sort -V | tail -1)")
	echo "postgres:  $("$pgbin/postgres" --version 2>/dev/null || echo unknown)"
	echo "settings:  jobs=$jobs warmup=$warmup window=$window rounds=$rounds programs=$programs"
} | tee "$out/machine.txt" >&2

run_studioctl() { # round [name binary]
	local name=${2:-studioctl} bin=${3:-$out/runner.test}
	(cd "$root/internal/runner" &&
		STUDIO_BENCH10K=1 STUDIO_BENCH10K_JOBS="$jobs" STUDIO_BENCH10K_WARMUP="$warmup" \
			STUDIO_BENCH10K_WINDOW="$window" STUDIO_BENCH10K_OUT="$out/$name-$1.json" \
			"$bin" -test.run '^TestBench10k$' -test.count=1 -test.v -test.timeout=30m) \
		>"$out/$name-$1.log" 2>&1 || { cat "$out/$name-$1.log" >&2; return 1; }
	if [[ $name != studioctl ]]; then # the report tells the builds apart by program
		sed -i 's/"program": "studioctl-runner"/"program": "'"$name"'"/' "$out/$name-$1.json"
	fi
}

run_peer() { # program round
	local flags=(-lib "${1%-nosingleton}")
	[[ $1 == *-nosingleton ]] && flags+=(-singleton=false)
	"$out/peers10k" run "${flags[@]}" -jobs "$jobs" -warmup "$warmup" -window "$window" -out "$out/$1-$2.json" \
		>"$out/$1-$2.log" 2>&1 || { cat "$out/$1-$2.log" >&2; return 1; }
}

for r in $(seq 1 "$rounds"); do
	order=$programs
	if ((r % 2 == 0)); then order=$(printf '%s\n' $programs | tac | xargs); fi
	for p in $order; do
		echo "bench10k: round $r: $p" >&2
		before=$(cut -d' ' -f1-3 /proc/loadavg)
		case $p in
		studioctl) run_studioctl "$r" ;;
		studioctl-base) run_studioctl "$r" studioctl-base "$base_test" ;;
		*) run_peer "$p" "$r" ;;
		esac
		# The machine is shared: keep its load beside each result.
		echo "round $r $p: load average before $before, after $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load.txt" >&2
	done
done

{
	"$out/peers10k" report "$out"/*.json
	echo
	echo "Load average (1, 5, 15 min) around each run:"
	cat "$out/load.txt"
} | tee "$out/report.txt"
