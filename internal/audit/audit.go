// Package audit writes the studio_audit row that every operator command that
// changes something leaves behind (SPEC §9).
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Execer is the part of a pool, connection or transaction that Write needs.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Entry is one audited change.
type Entry struct {
	Actor  string         // who: user@host (DefaultActor) unless --actor
	Action string         // what: "locks.release", "replicas.forget", ...
	Target string         // on what: a lock name, a replica id, ...
	Reason string         // why, as the operator said
	Detail map[string]any // the values before and after
}

// Queryer is the part of a pool, connection or transaction that Insert needs.
type Queryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const insertSQL = `INSERT INTO studio_audit (at, actor, action, target, reason, detail) VALUES (now(), $1, $2, $3, $4, $5)`

// encodeDetail is the detail's JSON. It is sent as a string: a []byte
// would go as bytea in pgx's exec mode (poolers, docs/poolers.md), which
// the json column refuses.
func encodeDetail(e Entry) ([]byte, error) {
	if e.Detail == nil {
		return []byte("{}"), nil
	}
	detail, err := json.Marshal(e.Detail)
	if err != nil {
		return nil, fmt.Errorf("encode audit detail: %w", err)
	}
	return detail, nil
}

// Write inserts e; pass the transaction that makes the change so both commit together.
func Write(ctx context.Context, q Execer, e Entry) error {
	detail, err := encodeDetail(e)
	if err != nil {
		return err
	}
	if _, err := q.Exec(ctx, insertSQL, e.Actor, e.Action, e.Target, e.Reason, string(detail)); err != nil {
		return fmt.Errorf("write audit row: %w", err)
	}
	return nil
}

// Insert is Write that returns the new row's seq, for a row that refers to
// its audit entry (a studio_request).
func Insert(ctx context.Context, q Queryer, e Entry) (int64, error) {
	detail, err := encodeDetail(e)
	if err != nil {
		return 0, err
	}
	var seq int64
	if err := q.QueryRow(ctx, insertSQL+` RETURNING seq`, e.Actor, e.Action, e.Target, e.Reason, string(detail)).Scan(&seq); err != nil {
		return 0, fmt.Errorf("write audit row: %w", err)
	}
	return seq, nil
}

// DefaultActor is user@host: USER, else LOGNAME, read through getenv so a
// command reads only the environment it was given; else the name of this
// process's uid (a root shell or a container sets neither variable); else
// uid:N. Never "unknown" when the uid has a name.
func DefaultActor(getenv func(string) string) string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "localhost"
	}
	return actorName(getenv, os.Getuid(), lookupUserName) + "@" + h
}

// actorName is the user part of the default actor; lookup names a uid.
func actorName(getenv func(string) string, uid int, lookup func(uid int) (string, error)) string {
	for _, k := range []string{"USER", "LOGNAME"} {
		if u := getenv(k); u != "" {
			return u
		}
	}
	if name, err := lookup(uid); err == nil && name != "" {
		return name
	}
	return "uid:" + strconv.Itoa(uid)
}

// lookupUserName is the user name of uid from the user database.
func lookupUserName(uid int) (string, error) {
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return "", err
	}
	return u.Username, nil
}
