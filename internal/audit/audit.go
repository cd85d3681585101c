// Package audit writes the studio_audit row that every operator command that
// changes something leaves behind (SPEC §9).
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgconn"
)

// Execer is the part of a pool, connection or transaction that Write needs.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Entry is one audited change.
type Entry struct {
	Actor  string         // who: $USER@host unless --actor
	Action string         // what: "locks.release", "replicas.forget", ...
	Target string         // on what: a lock name, a replica id, ...
	Reason string         // why, as the operator said
	Detail map[string]any // the values before and after
}

const insertSQL = `INSERT INTO studio_audit (at, actor, action, target, reason, detail) VALUES (now(), $1, $2, $3, $4, $5)`

// Write inserts e; pass the transaction that makes the change so both commit together.
func Write(ctx context.Context, q Execer, e Entry) error {
	detail, err := json.Marshal(e.Detail)
	if err != nil {
		return fmt.Errorf("encode audit detail: %w", err)
	}
	if e.Detail == nil {
		detail = []byte("{}")
	}
	if _, err := q.Exec(ctx, insertSQL, e.Actor, e.Action, e.Target, e.Reason, detail); err != nil {
		return fmt.Errorf("write audit row: %w", err)
	}
	return nil
}

// DefaultActor is $USER@host.
func DefaultActor() string {
	u := os.Getenv("USER")
	if u == "" {
		u = os.Getenv("LOGNAME")
	}
	if u == "" {
		u = "unknown"
	}
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "localhost"
	}
	return u + "@" + h
}
