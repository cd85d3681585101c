package replicas

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// processKey names where this process's pid means something: the
// kernel's boot id and this process's pid namespace,
// "<boot_id>/pid:[<inode>]" (column process, migration 00021). "" when
// either cannot be read: then no row is ever proved ended.
func processKey() string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil || !strings.HasPrefix(ns, "pid:[") {
		return ""
	}
	b := strings.TrimSpace(string(boot))
	if b == "" {
		return ""
	}
	return b + "/" + ns
}

// processGone reports whether no process has pid in this process's pid
// namespace: the kernel says there is none (ESRCH). A process that exists,
// whoever owns it (EPERM), stopped or a zombie, is not gone; nor is this
// process's own pid (another registry of this process, as in tests, holds
// the row then).
func processGone(pid int) bool {
	return pid > 0 && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// hasProcessColumnSQL: migration 00021 is applied (a replica may run on an
// older schema with database.migrate off).
const hasProcessColumnSQL = `SELECT EXISTS (SELECT 1 FROM pg_attribute
WHERE attrelid = to_regclass('studio_replica') AND attname = 'process' AND NOT attisdropped)`

// endedHolderSQL reads who holds the row of an id.
const endedHolderSQL = `SELECT incarnation, pid, host, process FROM studio_replica WHERE id = $1`

// endedHolder returns the incarnation of the live row of this replica's id
// when it is proved to have ended: it was registered by a process of this
// machine's boot and pid namespace (process = key), on this host, whose
// pid no process has any more. Two live processes with one id are never
// taken for this: a live holder's pid exists.
func (r *Registry) endedHolder(ctx context.Context, conn *pgx.Conn, key string) (uuid.UUID, int, bool, error) {
	var (
		inc     uuid.UUID
		pid     int
		host    string
		process *string
	)
	err := conn.QueryRow(ctx, endedHolderSQL, r.o.ID).Scan(&inc, &pid, &host, &process)
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, 0, false, nil
	}
	if err != nil {
		return uuid.Nil, 0, false, err
	}
	if key == "" || process == nil || *process != key || host != r.o.Host || inc == r.incarn {
		return uuid.Nil, 0, false, nil
	}
	return inc, pid, processGone(pid), nil
}
