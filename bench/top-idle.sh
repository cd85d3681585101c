#!/usr/bin/env bash
# The idle cost of `studioctl top` (issue 27, part 4): the screen open on a
# view of an installation where nothing changes, with JOBS job status rows
# (10 and 10,000 by default). For each count and view, every binary in BINS
# at the same time (side by side, so they share the machine's load): each
# on a database of its own, migrated, with the status rows of one replica
# that is gone (nothing wakes the bus, so top reads only by its 10 s poll),
# top in a tmux window of 160x48; after WARMUP, pg_stat_statements is reset
# and the process's CPU time read, and after WINDOW both are read again. It
# prints one line per binary, count and view: CPU share of one core,
# statements a minute, and the server time those statements took a minute.
# The load average before and after goes to stderr.
#
# usage: DATABASE_URL=postgres://... bench/top-idle.sh
#   JOBS="10 10000" VIEWS="1 2" WARMUP=15s WINDOW=60s
#   BINS="before=path/to/old after=path/to/new" (default: this tree, built)
#   (VIEWS: the views measured, by their keys: 1 replicas, 2 jobs)
# top reads an unchanged view again only after 100 times its read's cost
# (at most 5 min, top.RefreshMax): a WINDOW of 5 min or more sees those
# reads at 10,000 jobs; a shorter one may or may not.
# The server must load pg_stat_statements (shared_preload_libraries); the
# script creates the extension in each database it makes, and drops the
# databases at the end.
set -euo pipefail

counts=${JOBS:-10 10000}
views=${VIEWS:-1 2}
warmup=${WARMUP:-15s}
window=${WINDOW:-60s}
admin=${DATABASE_URL:?set DATABASE_URL to an admin connection (a superuser: the script creates databases)}
bins=${BINS:-}
if [ -z "$bins" ]; then
  bin=$(mktemp -d)/studioctl
  go build -o "$bin" ./cmd/studioctl
  bins="this=$bin"
fi
command -v tmux >/dev/null || { echo "top-idle: tmux is needed" >&2; exit 1; }

secs() { # 15s -> 15, 5m -> 300
  case $1 in
  *m) echo $((${1%m} * 60)) ;;
  *) echo "${1%s}" ;;
  esac
}

sock=$(mktemp -u /tmp/top-idle.XXXXXX)
dbs=()
cleanup() {
  tmux -S "$sock" kill-server 2>/dev/null || true
  for db in "${dbs[@]}"; do psql "$admin" -qXc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

with_db() { # URL of database $1 on the admin server
  python3 -c 'import sys,urllib.parse as u; p=u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/"+sys.argv[2])))' "$admin" "$1"
}

cpu() { # CPU ticks of process $1
  awk '{print $14+$15}' "/proc/$1/stat"
}

clk=$(getconf CLK_TCK)
w=$(secs "$window")
printf 'bin\tjobs\tview\tcpu_share\tstatements_per_min\tstatement_ms_per_min\n'
for n in $counts; do
for view in $views; do
  declare -A pid=() t0=() url=()
  for b in $bins; do
    label=${b%%=*} bin=${b#*=}
    db=top_idle_${label}_$n
    dbs+=("$db")
    url[$label]=$(with_db "$db")
    psql "$admin" -qXc "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" >/dev/null 2>&1
    psql "${url[$label]}" -qXc "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null
    STUDIO_DATABASE_URL=${url[$label]} "$bin" migrate up >/dev/null 2>&1
    psql "${url[$label]}" -qX >/dev/null <<SQL
INSERT INTO studio_replica (id, incarnation, host, pid, version, state, heartbeat_at, stopped_at)
VALUES ('r1', gen_random_uuid(), 'h1', 1, 'dev', 'stopped', now() - interval '1 minute', now() - interval '1 minute');
INSERT INTO studio_job_status (replica_id, job_id, scope, schedule, next_fire_at, last_started_at, last_finished_at, last_outcome, runs)
SELECT 'r1', 'job-' || lpad(g::text, 5, '0'), 'installation', 'every ' || (1 + g % 10) || 's',
       now() + interval '5 seconds', now() - interval '5 seconds', now() - interval '4 seconds', 'succeeded', g
FROM generate_series(1, $n) g;
ANALYZE;
SQL
    s=top_${label}_$n
    tmux -S "$sock" -f /dev/null new-session -d -s "$s" -x 160 -y 48 \
      "env STUDIO_DATABASE_URL='${url[$label]}' NO_COLOR=1 '$bin' top --read-only; sleep 3600"
    # The view, once the first screen is up.
    for _ in $(seq 300); do
      tmux -S "$sock" capture-pane -p -t "$s" | grep -q 'studioctl top' && break
      sleep 0.1
    done
    tmux -S "$sock" send-keys -t "$s" "$view"
    shell=$(tmux -S "$sock" display-message -p -t "$s" '#{pane_pid}')
    pid[$label]=$(pgrep -P "$shell" -n)
    [ -n "${pid[$label]}" ] || { echo "top-idle: $label: top is not running:" >&2; tmux -S "$sock" capture-pane -p -t "$s" >&2; exit 1; }
  done
  sleep "$(secs "$warmup")"
  echo "top-idle: jobs $n view $view: load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  for b in $bins; do
    label=${b%%=*}
    t0[$label]=$(cpu "${pid[$label]}")
    psql "${url[$label]}" -qXc "SELECT pg_stat_statements_reset()" >/dev/null
  done
  sleep "$w"
  echo "top-idle: jobs $n view $view: load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  for b in $bins; do
    label=${b%%=*}
    t1=$(cpu "${pid[$label]}")
    read -r calls ms < <(psql "${url[$label]}" -qXAtF ' ' -c "SELECT coalesce(sum(calls),0), round(coalesce(sum(total_exec_time),0)::numeric, 1) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = current_database() AND query NOT LIKE '%pg_stat_statements%'")
    awk -v b="$label" -v n="$n" -v view="$view" -v t0="${t0[$label]}" -v t1="$t1" -v clk="$clk" -v w="$w" -v calls="$calls" -v ms="$ms" \
      'BEGIN { printf "%s\t%d\t%s\t%.2f%%\t%.0f\t%.1f\n", b, n, view, 100*(t1-t0)/clk/w, calls*60/w, ms*60/w }'
    tmux -S "$sock" kill-session -t "top_${label}_$n"
  done
  unset pid t0 url
done
done
