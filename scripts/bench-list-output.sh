#!/usr/bin/env bash
# Measures `studioctl locks list` on 10,000 rows, piped (tab-separated) and
# on a terminal (STUDIO_FORCE_TTY=stdout: tablewriter, colour, relative
# times), against psql's aligned and unaligned output of the same table
# (docs/benchmarks.md, "locks list output, piped and on a terminal").
#
# It starts its own throwaway PostgreSQL cluster (as the postgres user when
# run as root) in a temporary folder on a free port, with fsync=off, and
# removes it on exit. Output goes to /dev/null in every case, so the
# terminal case measures the rendering, not a terminal emulator.
#
# Usage: scripts/bench-list-output.sh
# Environment: RUNS (default 15), ROWS (default 10000; 0 measures fixed costs), PG_BIN (folder of initdb/pg_ctl/psql),
# STUDIOCTL_BIN (use this binary instead of building ./cmd/studioctl).
set -euo pipefail

RUNS=${RUNS:-15}
ROWS=${ROWS:-10000}

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

log() { printf '%s\n' "$*" >&2; }
die() { log "bench-list-output: $*"; exit 1; }

if [[ -z ${PG_BIN:-} ]]; then
	if [[ -x /usr/lib/postgresql/15/bin/initdb ]]; then
		PG_BIN=/usr/lib/postgresql/15/bin
	elif command -v initdb >/dev/null; then
		PG_BIN=$(dirname "$(readlink -f "$(command -v initdb)")")
	else
		die "initdb not found: install PostgreSQL 15 or set PG_BIN"
	fi
fi
command -v hyperfine >/dev/null || die "hyperfine not found (apt-get install hyperfine)"
command -v jq >/dev/null || die "jq not found"

as_pg() {
	if [[ $(id -u) == 0 ]]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

port=""
for _ in $(seq 50); do
	p=$((20000 + RANDOM % 40000))
	if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		port=$p
		break
	fi
done
[[ -n $port ]] || die "no free port found"

work=$(mktemp -d "${TMPDIR:-/tmp}/bench-list.XXXXXX")
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
as_pg "$PG_BIN/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C --no-sync >"$work/initdb.log" 2>&1 ||
	{ cat "$work/initdb.log" >&2; die "initdb failed"; }
settings="-p $port -k $data -c listen_addresses=127.0.0.1 -c timezone=America/Los_Angeles"
settings+=" -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
as_pg "$PG_BIN/pg_ctl" start -w -D "$data" -l "$data/server.log" -o "$settings" >/dev/null ||
	{ cat "$data/server.log" >&2; die "pg_ctl start failed"; }
url=postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable

if [[ -n ${STUDIOCTL_BIN:-} ]]; then
	studioctl=$STUDIOCTL_BIN
else
	studioctl=$work/studioctl
	go build -o "$studioctl" ./cmd/studioctl || die "go build ./cmd/studioctl failed"
fi
"$studioctl" migrate up --database-url "$url" >"$work/migrate.log" 2>&1 ||
	{ cat "$work/migrate.log" >&2; die "studioctl migrate up failed"; }

# The rows of bench-locks.sh: 20 replicas (10 live, 10 stopped), locks held
# by them or by Java-looking hosts, half live, half expired.
"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -d "$url" -c "
INSERT INTO studio_replica(id, incarnation, host, pid, version, state, heartbeat_at)
SELECT 'replica-' || g, gen_random_uuid(), 'host-' || g, 1000 + g, 'bench',
       CASE WHEN g <= 10 THEN 'ready' ELSE 'stopped' END, now()
FROM generate_series(1, 20) g;
INSERT INTO shedlock(name, lock_until, locked_at, locked_by)
SELECT 'job-' || lpad(g::text, 5, '0'),
       timezone('utc', now()) + CASE WHEN g % 2 = 0 THEN interval '1 hour' ELSE interval '-1 hour' END,
       timezone('utc', now()) - interval '1 minute',
       CASE WHEN g % 3 = 0 THEN 'java-host-' || (g % 7) ELSE 'replica-' || (1 + g % 20) END
FROM generate_series(1, $ROWS) g;"
"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -d "$url" -c "VACUUM ANALYZE shedlock, studio_replica"
n=$("$studioctl" locks list --database-url "$url" | tail -n +2 | wc -l)
[[ $n == "$ROWS" ]] || die "studioctl locks list printed $n rows, want $ROWS"

names=("psql" "psql -At -F tab" "studioctl locks list (piped)" "studioctl locks list (terminal)")
cmds=(
	"$PG_BIN/psql -X -d $url -c 'SELECT * FROM shedlock'"
	"$PG_BIN/psql -X -At -F '	' -d $url -c 'SELECT * FROM shedlock'"
	"$studioctl locks list --database-url $url"
	"env STUDIO_FORCE_TTY=stdout $studioctl locks list --database-url $url"
)
hf=(hyperfine -N --style basic --warmup 3 --runs "$RUNS" --export-json "$work/list.json")
for i in "${!names[@]}"; do hf+=(-n "${names[$i]}" "${cmds[$i]}"); done
"${hf[@]}" >"$work/hyperfine.out" 2>&1 || { cat "$work/hyperfine.out" >&2; die "hyperfine failed"; }

printf 'locks list on %d rows, median of %d runs, hyperfine %s (-N, output to /dev/null, 3 warm-up runs), load %s\n' \
	"$ROWS" "$RUNS" "$(hyperfine --version | awk '{ print $2 }')" "$(cut -d' ' -f1-3 /proc/loadavg)"
psql_ms=$(jq -r '.results[0].median * 1000' "$work/list.json")
for i in "${!names[@]}"; do
	ms=$(jq -r ".results[$i].median * 1000" "$work/list.json")
	printf '  %-34s %8.1f ms   %5.2fx psql\n' "${names[$i]}" "$ms" "$(awk -v a="$ms" -v b="$psql_ms" 'BEGIN { print a / b }')"
done
