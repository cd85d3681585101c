#!/usr/bin/env bash
# Reproduces the lock measurements of issue 2 (docs/benchmarks.md, "Locks
# (issue 2)") side by side, in one run, on this machine:
#
#   1. lock cycles per second (acquire + unlock of one name, one connection):
#      pgbench running the provider's two statements with -M prepared, against
#      BenchmarkAcquireUnlock (internal/locks/cycle_bench_test.go), interleaved
#      round by round on the same server; medians and the ratio Go/pgbench
#      (target >= 0.8);
#   2. the statement-count proof: TestAcquireIsOneStatement (n acquires are n
#      executions of one statement in n round trips), run against the same
#      server;
#   3. wall time of `studioctl locks list` (table and -o json) on 10,000 rows
#      beside `psql -c 'select * from shedlock'`.
#
# It starts its own throwaway PostgreSQL cluster (initdb, as the postgres user
# when run as root) in a temporary folder on a free port, and removes it on
# exit. The cluster runs with fsync=off, synchronous_commit=off and
# full_page_writes=off (as the test harness does), so the numbers measure
# round trips and statement execution, not the disk. pg_stat_statements is
# preloaded (as in the harness), which costs both sides the same.
#
# Usage: scripts/bench-locks.sh
# Environment: ROUNDS (default 5), BENCH_SECONDS (default 10), LIST_RUNS
# (default 15), PG_BIN (folder of initdb/pg_ctl/pgbench/psql), STUDIOCTL_BIN
# (use this studioctl binary instead of building ./cmd/studioctl).
set -euo pipefail

ROUNDS=${ROUNDS:-5}
BENCH_SECONDS=${BENCH_SECONDS:-10}
LIST_RUNS=${LIST_RUNS:-15}
LIST_ROWS=10000

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

log() { printf '%s\n' "$*" >&2; }
die() { log "bench-locks: $*"; exit 1; }

# --- PostgreSQL binaries: PG_BIN, then 15 in the usual place, then PATH.
if [[ -z ${PG_BIN:-} ]]; then
	if [[ -x /usr/lib/postgresql/15/bin/initdb ]]; then
		PG_BIN=/usr/lib/postgresql/15/bin
	elif command -v initdb >/dev/null; then
		PG_BIN=$(dirname "$(readlink -f "$(command -v initdb)")")
	else
		die "initdb not found: install PostgreSQL 15 or set PG_BIN"
	fi
fi
for b in initdb pg_ctl pgbench psql; do
	[[ -x $PG_BIN/$b ]] || die "$PG_BIN/$b not found"
done

# As root, every server binary runs as postgres (PostgreSQL refuses root).
as_pg() {
	if [[ $(id -u) == 0 ]]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

# --- A free port: nothing answers on it.
port=""
for _ in $(seq 50); do
	p=$((20000 + RANDOM % 40000))
	if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		port=$p
		break
	fi
done
[[ -n $port ]] || die "no free port found"

# --- The throwaway cluster, in a folder the postgres user can reach.
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-locks.XXXXXX")
chmod 755 "$work"
data=$work/data
cleanup() {
	if [[ -f $data/postmaster.pid ]]; then
		as_pg "$PG_BIN/pg_ctl" stop -D "$data" -m immediate -w >/dev/null 2>&1 || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$data"
[[ $(id -u) == 0 ]] && chown postgres: "$data"
chmod 700 "$data"
log "initdb in $data (port $port)"
as_pg "$PG_BIN/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C --no-sync >"$work/initdb.log" 2>&1 ||
	{ cat "$work/initdb.log" >&2; die "initdb failed"; }
settings="-p $port -k $data -c listen_addresses=127.0.0.1 -c timezone=America/Los_Angeles"
settings+=" -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
settings+=" -c max_connections=100 -c shared_preload_libraries=pg_stat_statements"
as_pg "$PG_BIN/pg_ctl" start -w -D "$data" -l "$data/server.log" -o "$settings" >/dev/null ||
	{ cat "$data/server.log" >&2; die "pg_ctl start failed"; }

server=postgres://postgres@127.0.0.1:$port
url() { printf '%s/%s?sslmode=disable' "$server" "$1"; }
sql() { "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -d "$(url "$1")" -c "$2"; }
export PGAPPNAME=bench-locks

# --- Build once: the studioctl binary and the locks test binary.
log "building studioctl and the internal/locks test binary"
if [[ -n ${STUDIOCTL_BIN:-} ]]; then
	studioctl=$STUDIOCTL_BIN
else
	studioctl=$work/studioctl
	go build -o "$studioctl" ./cmd/studioctl || die "go build ./cmd/studioctl failed (set STUDIOCTL_BIN to use a prebuilt binary)"
fi
go test -c -o "$work/locks.test" ./internal/locks/ || die "go test -c ./internal/locks failed"

# The migrated template of every measured database (the shedlock table as
# `studioctl migrate up` creates it).
sql postgres "CREATE DATABASE bench_template"
"$studioctl" migrate up --database-url "$(url bench_template)" >"$work/migrate.log" 2>&1 ||
	{ cat "$work/migrate.log" >&2; die "studioctl migrate up failed"; }

# --- pgbench's script: the provider's acquire and unlock, one line each,
# exactly as internal/locks/locks.go builds them (the test
# TestBenchPgbenchScriptRunsTheProviderStatements checks it). Variables:
# lockname = $1, atmostfor/atleastfor = $2 (seconds), lockedby = $3.
cat >"$work/cycle.sql" <<'PGBENCH'
INSERT INTO "shedlock"("name", "lock_until", "locked_at", "locked_by") VALUES(:lockname, timezone('utc', CURRENT_TIMESTAMP) + make_interval(secs => :atmostfor), timezone('utc', CURRENT_TIMESTAMP), :lockedby) ON CONFLICT ("name") DO UPDATE SET "lock_until" = timezone('utc', CURRENT_TIMESTAMP) + make_interval(secs => :atmostfor), "locked_at" = timezone('utc', CURRENT_TIMESTAMP), "locked_by" = :lockedby WHERE "shedlock"."name" = :lockname AND "shedlock"."lock_until" <= timezone('utc', CURRENT_TIMESTAMP);
UPDATE "shedlock" SET "lock_until" = CASE WHEN "locked_at" + make_interval(secs => :atleastfor) > timezone('utc', CURRENT_TIMESTAMP) THEN "locked_at" + make_interval(secs => :atleastfor) ELSE timezone('utc', CURRENT_TIMESTAMP) END WHERE "name" = :lockname AND "locked_by" = :lockedby;
PGBENCH

# Each run prints "cycles/s client-CPU-µs/cycle" and keeps its output.
run_pgbench() { # round
	local db=pgbench_r$1 out=$work/pgbench_r$1.out
	sql postgres "CREATE DATABASE $db TEMPLATE bench_template"
	# `times` in the subshell reports pgbench's own CPU time (its children's).
	(
		"$PG_BIN/pgbench" -n -M prepared -c 1 -j 1 -T "$BENCH_SECONDS" -f "$work/cycle.sql" \
			-D lockname=bench-cycle -D lockedby=pgbench-1 -D atmostfor=60 -D atleastfor=0 \
			"$(url "$db")" >"$out" 2>&1 || exit
		times >"$out.cpu"
	) || { cat "$out" >&2; die "pgbench failed"; }
	sql postgres "DROP DATABASE $db"
	awk -v cpu="$(tail -1 "$out.cpu")" '
		function secs(t, a) { split(t, a, "m"); return a[1] * 60 + substr(a[2], 1, length(a[2]) - 1) }
		/^number of transactions actually processed:/ { n = $NF }
		/^tps = / { tps = $3 }
		END { split(cpu, c, " "); printf "%s %.1f\n", tps, (secs(c[1]) + secs(c[2])) * 1e6 / n }' "$out"
}

run_go() { # round
	local out=$work/go_r$1.out
	STUDIO_TEST_DATABASE_URL=$(url postgres) "$work/locks.test" -test.run '^$' \
		-test.bench '^BenchmarkAcquireUnlock$' -test.benchtime "${BENCH_SECONDS}s" -test.count 1 \
		>"$out" 2>&1 || { cat "$out" >&2; die "go benchmark failed"; }
	awk '/^BenchmarkAcquireUnlock/ {
		for (i = 1; i < NF; i++) m[$(i+1)] = $i
		printf "%s %.1f\n", m["cycles/s"], m["user-us/cycle"] + m["sys-us/cycle"]; exit }' "$out"
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2] + v[NR/2+1]) / 2 }'; }
div() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }

# --- 1. Cycles per second, interleaved; the order alternates every round.
log "lock cycles: $ROUNDS rounds of pgbench and Go, ${BENCH_SECONDS}s each, interleaved"
pg_rates=() go_rates=() pg_cpus=() go_cpus=() loads=()
for r in $(seq "$ROUNDS"); do
	loads+=("$(cut -d' ' -f1 /proc/loadavg)")
	if ((r % 2)); then
		read -r pg pg_cpu < <(run_pgbench "$r")
		read -r go go_cpu < <(run_go "$r")
	else
		read -r go go_cpu < <(run_go "$r")
		read -r pg pg_cpu < <(run_pgbench "$r")
	fi
	[[ -n $pg && -n $go ]] || die "round $r: no result (see above)"
	pg_rates+=("$pg") go_rates+=("$go") pg_cpus+=("$pg_cpu") go_cpus+=("$go_cpu")
	log "$(printf 'round %d: pgbench %6.0f cycles/s (%5.1f µs CPU/cycle)   go %6.0f cycles/s (%5.1f µs CPU/cycle)   go/pgbench %s   load %s' \
		"$r" "$pg" "$pg_cpu" "$go" "$go_cpu" "$(div "$go" "$pg")" "${loads[-1]}")"
done
pg_med=$(printf '%s\n' "${pg_rates[@]}" | median)
go_med=$(printf '%s\n' "${go_rates[@]}" | median)
pg_cpu_med=$(printf '%s\n' "${pg_cpus[@]}" | median)
go_cpu_med=$(printf '%s\n' "${go_cpus[@]}" | median)
ratio=$(div "$go_med" "$pg_med")
round_ratios=$(for i in "${!pg_rates[@]}"; do div "${go_rates[$i]}" "${pg_rates[$i]}"; echo; done | median)
roundtrips=$(awk '/^BenchmarkAcquireUnlock/ { for (i = 1; i < NF; i++) if ($(i+1) == "roundtrips/cycle") { print $i; exit } }' "$work/go_r1.out")

# --- 2. The statement-count proof, on the same server.
log "statement count: TestAcquireIsOneStatement"
(cd internal/locks && STUDIO_TEST_DATABASE_URL=$(url postgres) "$work/locks.test" -test.count 1 -test.v \
	-test.run '^(TestAcquireIsOneStatement|TestBenchPgbenchScriptRunsTheProviderStatements)$') >"$work/proof.out" 2>&1 &&
	proof=PASS || proof=FAIL
[[ $proof == PASS ]] || cat "$work/proof.out" >&2

# --- 3. locks list on 10,000 rows: 20 replicas (10 live, 10 stopped); rows
# held by them or by Java-looking hosts, half live, half expired.
log "locks list: $LIST_ROWS rows, $LIST_RUNS runs each"
sql postgres "CREATE DATABASE bench_list TEMPLATE bench_template"
sql bench_list "
INSERT INTO studio_replica(id, incarnation, host, pid, version, state, heartbeat_at)
SELECT 'replica-' || g, gen_random_uuid(), 'host-' || g, 1000 + g, 'bench',
       CASE WHEN g <= 10 THEN 'ready' ELSE 'stopped' END, now()
FROM generate_series(1, 20) g;
INSERT INTO shedlock(name, lock_until, locked_at, locked_by)
SELECT 'job-' || lpad(g::text, 5, '0'),
       timezone('utc', now()) + CASE WHEN g % 2 = 0 THEN interval '1 hour' ELSE interval '-1 hour' END,
       timezone('utc', now()) - interval '1 minute',
       CASE WHEN g % 3 = 0 THEN 'java-host-' || (g % 7) ELSE 'replica-' || (1 + g % 20) END
FROM generate_series(1, $LIST_ROWS) g;"
sql bench_list "VACUUM ANALYZE shedlock, studio_replica"
list_url=$(url bench_list)
n=$("$studioctl" locks list --database-url "$list_url" -o json | jq length)
[[ $n == "$LIST_ROWS" ]] || die "studioctl locks list returned $n rows, want $LIST_ROWS"

names=(psql "studioctl locks list" "studioctl locks list -o json")
cmds=(
	"$PG_BIN/psql -X -d $list_url -c 'select * from shedlock'"
	"$studioctl locks list --database-url $list_url"
	"$studioctl locks list --database-url $list_url -o json"
)
medians=()
if command -v hyperfine >/dev/null; then
	timer="hyperfine $(hyperfine --version | awk '{ print $2 }') (-N, output to /dev/null, 3 warm-up runs)"
	hf=(hyperfine -N --style basic --warmup 3 --runs "$LIST_RUNS" --export-json "$work/list.json")
	for i in "${!names[@]}"; do hf+=(-n "${names[$i]}" "${cmds[$i]}"); done
	"${hf[@]}" >"$work/hyperfine.out" 2>&1 || { cat "$work/hyperfine.out" >&2; die "hyperfine failed"; }
	for i in "${!names[@]}"; do
		medians+=("$(jq -r ".results[$i].median * 1000" "$work/list.json")")
	done
else
	timer="a shell loop with date +%s%N (hyperfine not installed), 3 warm-up runs"
	for i in "${!names[@]}"; do
		for w in 1 2 3; do eval "${cmds[$i]}" >/dev/null; done
		medians+=("$(for k in $(seq "$LIST_RUNS"); do
			t0=$(date +%s%N)
			eval "${cmds[$i]}" >/dev/null
			t1=$(date +%s%N)
			echo $(((t1 - t0) / 1000))
		done | median | awk '{ print $1 / 1000 }')")
	done
fi

# --- Summary.
cat <<EOF

== Locks (issue 2) ==
machine:     $(nproc) CPUs, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo) (Go reports: $(awk '/^cpu:/ { sub(/^cpu: */, ""); sub(/ +$/, ""); print; exit }' "$work/go_r1.out"))
postgresql:  $("$PG_BIN/postgres" --version) (fsync=off, synchronous_commit=off, full_page_writes=off)
pgbench:     $("$PG_BIN/pgbench" --version)
go:          $(go version)

Lock cycles per second (TryLock + Unlock of one name, one connection, ${BENCH_SECONDS}s per run),
and the client's own CPU time per cycle (pgbench: bash times; Go: rusage around the loop):
round   pgbench -M prepared   Go BenchmarkAcquireUnlock   Go/pgbench   CPU µs/cycle pgbench   Go   load avg
EOF
for i in "${!pg_rates[@]}"; do
	printf '%5d   %19.0f   %25.0f   %10s   %20.1f   %5.1f   %8s\n' $((i + 1)) "${pg_rates[$i]}" "${go_rates[$i]}" \
		"$(div "${go_rates[$i]}" "${pg_rates[$i]}")" "${pg_cpus[$i]}" "${go_cpus[$i]}" "${loads[$i]}"
done
printf 'median  %19.0f   %25.0f   %10s   %20.1f   %5.1f\n' "$pg_med" "$go_med" "$ratio" "$pg_cpu_med" "$go_cpu_med"
met=$(awk -v r="$ratio" 'BEGIN { print (r >= 0.8) ? "met" : "MISSED" }')
cat <<EOF
ratio of the medians Go/pgbench: $ratio (median of the per-round ratios: $round_ratios)
target Go/pgbench >= 0.8: $met
Go round trips per cycle (wire count): $roundtrips
statement count proof (TestAcquireIsOneStatement): $proof

locks list on $LIST_ROWS rows, median wall time of $LIST_RUNS runs, $timer:
EOF
for i in "${!names[@]}"; do
	printf '  %-32s %8.1f ms   %5.2fx psql\n' "${names[$i]}" "${medians[$i]}" \
		"$(awk -v a="${medians[$i]}" -v b="${medians[0]}" 'BEGIN { print a / b }')"
done
