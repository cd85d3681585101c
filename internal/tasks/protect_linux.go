//go:build linux

package tasks

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/studioctl/studioctl/internal/db"
)

// A job command runs as the replica's own user, so without more it could
// read the replica's secrets through /proc: /proc/<replica>/environ holds
// the environment the replica was started with (STUDIO_DATABASE_URL,
// PGPASSWORD), whatever the replica did with os.Unsetenv since, and
// /proc/<replica>/mem and ptrace give its whole memory. ProtectSecrets
// closes both for a replica that does not run as root.

// prSetDumpable is PR_SET_DUMPABLE of prctl(2).
const prSetDumpable = 4

// secretEnv names the variables whose values ProtectSecrets overwrites in
// the process's initial environment: those that carry a database
// connection or its password (docs/jobs-processes.md).
var secretEnv = []string{"STUDIO_DATABASE_URL", "STUDIO_DATABASE_LISTEN_URL", "DATABASE_URL", "PGPASSWORD"}

// protectOnce makes ProtectSecrets act once per process: what it changes
// (the process's dumpable flag and its initial environment) belongs to the
// whole process, not to a caller.
var protectOnce = sync.OnceValue(protectSecrets)

// ProtectSecrets hides the replica's secrets from the processes of its own
// user, job commands included. It is called before the first command
// starts; calling it earlier (first thing in a replica) covers the time
// before that too. It is safe to call any number of times.
//
//   - It overwrites, in the memory that /proc/<pid>/environ reads, the
//     values of STUDIO_DATABASE_URL, DATABASE_URL, PGPASSWORD and of every
//     variable whose name ends in PASSWORD, with 'x'. Go's copy of the
//     environment (os.Getenv) is not changed. os.Unsetenv would not do it:
//     it changes only Go's copy.
//   - It makes the process not dumpable (prctl PR_SET_DUMPABLE 0): the
//     kernel then refuses /proc/<pid>/environ, /proc/<pid>/mem, ptrace and
//     core dumps to every process without CAP_SYS_PTRACE, the replica's own
//     user included. /proc/<pid>/stat, cmdline, limits and fd (for the
//     process itself) stay readable. Commands are new programs and are
//     dumpable again.
//
// A job that runs as root has CAP_SYS_PTRACE and can still read the
// replica's memory, and any job of the replica's user can read the files
// that user can (the config file, ~/.pgpass, the embedded database's
// password file): run jobs that must not see the database as another user.
func ProtectSecrets() error { return protectOnce() }

func protectSecrets() error {
	var errs []error
	if err := wipeInitialEnv(); err != nil {
		errs = append(errs, fmt.Errorf("overwrite secrets in the initial environment: %w", err))
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); errno != 0 {
		errs = append(errs, fmt.Errorf("prctl PR_SET_DUMPABLE: %w", errno))
	}
	return errors.Join(errs...)
}

// isSecretEnv reports whether the value of the variable name must not stay
// readable in /proc/<pid>/environ.
func isSecretEnv(name string) bool {
	for _, s := range secretEnv {
		if name == s {
			return true
		}
	}
	return strings.HasSuffix(strings.ToUpper(name), "PASSWORD")
}

// wipeInitialEnv overwrites the secret values in the process's initial
// environment (from env_start to env_end of /proc/self/stat), through
// /proc/self/mem, which a process may always write for itself.
func wipeInitialEnv() error {
	start, end, err := envArea()
	if err != nil || end <= start {
		return err
	}
	mem, err := os.OpenFile("/proc/self/mem", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer mem.Close()
	area := make([]byte, end-start)
	if _, err := mem.ReadAt(area, int64(start)); err != nil {
		return err
	}
	changed := false
	off := 0
	for _, kv := range bytes.Split(area, []byte{0}) {
		if k, v, ok := bytes.Cut(kv, []byte("=")); ok && len(v) > 0 && isSecretEnv(string(k)) {
			at := off + len(k) + 1
			for i := range v {
				area[at+i] = 'x'
			}
			changed = true
		}
		off += len(kv) + 1
	}
	if !changed {
		return nil
	}
	_, err = mem.WriteAt(area, int64(start))
	return err
}

// envArea reads env_start and env_end (fields 50 and 51) of /proc/self/stat.
func envArea() (start, end uint64, err error) { return procStatFields(50, 51) }

// procStatFields reads two numeric fields of /proc/self/stat, numbered as
// in proc(5).
func procStatFields(first, second int) (start, end uint64, err error) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("/proc/self/stat: no command name")
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3, the state
	if len(f) < second-2 {
		return 0, 0, fmt.Errorf("/proc/self/stat: no field %d", second)
	}
	if start, err = strconv.ParseUint(f[first-3], 10, 64); err != nil {
		return 0, 0, err
	}
	if end, err = strconv.ParseUint(f[second-3], 10, 64); err != nil {
		return 0, 0, err
	}
	return start, end, nil
}

// databaseURLFlag is the flag whose value HideArgSecrets hides.
const databaseURLFlag = "--database-url"

// HideArgSecrets hides the database password of a --database-url flag
// from /proc/<pid>/cmdline, which every local user can read (ps shows it).
// It must run first thing in main, before anything reads os.Args: Go's
// os.Args share their memory with the process's argument area, so it first
// replaces them with copies, then overwrites the password (as written and
// decoded) in that area with 'x', keeping its length. The flag's value in
// os.Args keeps the password.
func HideArgSecrets() error {
	hide := map[int][]string{}
	for i := 1; i < len(os.Args); i++ {
		a := os.Args[i]
		var url string
		switch {
		case a == "--":
			i = len(os.Args)
			continue
		case strings.HasPrefix(a, databaseURLFlag+"="):
			url = a[len(databaseURLFlag)+1:]
		case a == databaseURLFlag && i+1 < len(os.Args):
			url = os.Args[i+1]
			i++
		default:
			continue
		}
		if secrets := db.Secrets(url); len(secrets) > 0 {
			hide[i] = secrets
		}
	}
	if len(hide) == 0 {
		return nil
	}
	args := make([]string, len(os.Args))
	for i, a := range os.Args {
		args[i] = strings.Clone(a)
	}
	os.Args = args
	start, end, err := procStatFields(48, 49) // arg_start, arg_end
	if err != nil || end <= start {
		return err
	}
	mem, err := os.OpenFile("/proc/self/mem", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer mem.Close()
	area := make([]byte, end-start)
	if _, err := mem.ReadAt(area, int64(start)); err != nil {
		return err
	}
	parts := bytes.Split(area, []byte{0})
	for i, secrets := range hide {
		if i >= len(parts) {
			continue
		}
		for _, s := range secrets {
			for k := 0; s != "" && k+len(s) <= len(parts[i]); {
				j := bytes.Index(parts[i][k:], []byte(s))
				if j < 0 {
					break
				}
				copy(parts[i][k+j:], bytes.Repeat([]byte{'x'}, len(s)))
				k += j + len(s)
			}
		}
	}
	_, err = mem.WriteAt(area, int64(start))
	return err
}
