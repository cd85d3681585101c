#!/usr/bin/env bash
# The idle cost of `studioctl top` (issue 27, part 4): the screen open on the
# jobs view of an installation where nothing changes, with JOBS job status
# rows (10 and 10,000 by default), side by side in one run. For each count:
# a database of its own, migrated, with the status rows of one replica that
# is gone (nothing wakes the bus, so top reads only by its 10 s poll); top in
# a tmux window of 160x48; after WARMUP, pg_stat_statements is reset and the
# process's CPU time read, and after WINDOW both are read again. It prints
# one line per count: CPU share of one core, statements a minute, reads a
# minute (a read is one poll), and the server time those statements took.
#
# usage: DATABASE_URL=postgres://... bench/top-idle.sh
#   JOBS="10 10000" VIEWS="1 2" WARMUP=15s WINDOW=60s BIN=path/to/studioctl
#   (VIEWS: the views measured, by their keys: 1 replicas, 2 jobs)
# The server must load pg_stat_statements (shared_preload_libraries); the
# script creates the extension in each database it makes, and drops the
# databases at the end.
set -euo pipefail

counts=${JOBS:-10 10000}
views=${VIEWS:-1 2}
warmup=${WARMUP:-15s}
window=${WINDOW:-60s}
admin=${DATABASE_URL:?set DATABASE_URL to an admin connection (a superuser: the script creates databases)}
bin=${BIN:-}
if [ -z "$bin" ]; then
  bin=$(mktemp -d)/studioctl
  go build -o "$bin" ./cmd/studioctl
fi
command -v tmux >/dev/null || { echo "top-idle: tmux is needed" >&2; exit 1; }

secs() { # 15s -> 15
  echo "${1%s}"
}

sock=$(mktemp -u /tmp/top-idle.XXXXXX)
cleanup() {
  tmux -S "$sock" kill-server 2>/dev/null || true
  for n in $counts; do psql "$admin" -qXc "DROP DATABASE IF EXISTS top_idle_$n WITH (FORCE)" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

with_db() { # URL of database $1 on the admin server
  python3 -c 'import sys,urllib.parse as u; p=u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/"+sys.argv[2])))' "$admin" "$1"
}

clk=$(getconf CLK_TCK)
printf 'jobs\tview\tcpu_share\tstatements_per_min\tstatement_ms_per_min\n'
for n in $counts; do
for view in $views; do
  db=top_idle_$n
  url=$(with_db "$db")
  psql "$admin" -qXc "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" >/dev/null 2>&1
  psql "$url" -qXc "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null
  STUDIO_DATABASE_URL=$url "$bin" migrate up >/dev/null 2>&1
  psql "$url" -qX >/dev/null <<SQL
INSERT INTO studio_replica (id, incarnation, host, pid, version, state, heartbeat_at, stopped_at)
VALUES ('r1', gen_random_uuid(), 'h1', 1, 'dev', 'stopped', now() - interval '1 minute', now() - interval '1 minute');
INSERT INTO studio_job_status (replica_id, job_id, scope, schedule, next_fire_at, last_started_at, last_finished_at, last_outcome, runs)
SELECT 'r1', 'job-' || lpad(g::text, 5, '0'), 'installation', 'every ' || (1 + g % 10) || 's',
       now() + interval '5 seconds', now() - interval '5 seconds', now() - interval '4 seconds', 'succeeded', g
FROM generate_series(1, $n) g;
ANALYZE;
SQL
  tmux -S "$sock" -f /dev/null new-session -d -s "top$n" -x 160 -y 48 \
    "env STUDIO_DATABASE_URL='$url' NO_COLOR=1 '$bin' top --read-only; sleep 600"
  # The jobs view, once the first screen is up.
  for _ in $(seq 100); do
    tmux -S "$sock" capture-pane -p -t "top$n" | grep -q 'studioctl top' && break
    sleep 0.1
  done
  tmux -S "$sock" send-keys -t "top$n" "$view"
  sleep "$(secs "$warmup")"
  pid=$(pgrep -f "^$bin top --read-only" -n)
  read -r t0 < <(awk '{print $14+$15}' "/proc/$pid/stat")
  psql "$url" -qXc "SELECT pg_stat_statements_reset()" >/dev/null
  sleep "$(secs "$window")"
  read -r t1 < <(awk '{print $14+$15}' "/proc/$pid/stat")
  read -r calls ms < <(psql "$url" -qXAtF ' ' -c "SELECT coalesce(sum(calls),0), round(coalesce(sum(total_exec_time),0)::numeric, 1) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = '$db' AND query NOT LIKE '%pg_stat_statements%'")
  w=$(secs "$window")
  awk -v n="$n" -v view="$view" -v t0="$t0" -v t1="$t1" -v clk="$clk" -v w="$w" -v calls="$calls" -v ms="$ms" \
    'BEGIN { printf "%d\t%s\t%.2f%%\t%.0f\t%.1f\n", n, view, 100*(t1-t0)/clk/w, calls*60/w, ms*60/w }'
  tmux -S "$sock" kill-session -t "top$n"
done
done
