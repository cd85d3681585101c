// Package bus is studioctl's message bus over PostgreSQL LISTEN/NOTIFY
// (SPEC §6). Senders call Notify inside their transaction; every replica,
// the sender included, runs one Listener on a dedicated connection and
// handles every message on arrival. The wire format is documented for other
// tools in docs/bus.md.
package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
)

// Channel is the PostgreSQL notification channel. It is lower case because
// PostgreSQL folds unquoted identifiers, so `LISTEN studio` matches it.
const Channel = "studio"

// Version is the "v" field of every payload.
const Version = 1

// MaxFrameBytes is the largest payload Encode produces, safely under
// PostgreSQL's 8,000-byte pg_notify limit. A frame over it goes out without
// data and with "truncated": true; a seqs batch over it is split.
const MaxFrameBytes = 7500

// Message types.
const (
	TypeFrame  = "frame"
	TypeSeqs   = "seqs"
	TypeSignal = "signal"
)

// Signal kinds.
const (
	KindJobTrigger      = "job.trigger"
	KindJobSettings     = "job.settings"
	KindReplicaDrain    = "replica.drain"
	KindLeasesRebalance = "leases.rebalance"
	// KindReplicaState: a replica's row changed state (registered as
	// starting, ready, draining, stopped) or was forgotten. Only watches
	// (studioctl ... list --watch) read it; replicas ignore it.
	KindReplicaState = "replica.state"
	// KindLockReleased: studioctl locks release freed a lock. Only watches
	// read it; replicas ignore it.
	KindLockReleased = "lock.released"
)

// Message is one bus payload. Exactly one shape is used per Type: a stream
// frame (Stream, ID, Event, Data, Truncated), a batch of run seqs (Seqs) or a
// signal (Kind, Key).
type Message struct {
	V         int             `json:"v"`
	Type      string          `json:"type"` // "frame" | "seqs" | "signal"
	Stream    string          `json:"stream,omitempty"`
	ID        string          `json:"id,omitempty"`
	Event     string          `json:"event,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	Truncated bool            `json:"truncated,omitempty"`
	Seqs      []int64         `json:"seqs,omitempty"`
	Kind      string          `json:"kind,omitempty"`
	Key       string          `json:"key,omitempty"`
	// End and Started: a job.schedule signal's end of the run and its
	// start, in database time (RFC 3339, UTC), so a replica moves its timer
	// without reading the row; absent from older senders.
	End     string `json:"end,omitempty"`
	Started string `json:"started,omitempty"`
}

// Frame is a stream frame: event id of stream with its data (any JSON).
func Frame(stream, id, event string, data json.RawMessage) Message {
	return Message{V: Version, Type: TypeFrame, Stream: stream, ID: id, Event: event, Data: data}
}

// Seqs is a batch of studio_job_run seqs for receivers to load.
func Seqs(seqs ...int64) Message {
	return Message{V: Version, Type: TypeSeqs, Seqs: seqs}
}

// Signal is a signal of kind (for example KindJobTrigger) about key.
func Signal(kind, key string) Message {
	return Message{V: Version, Type: TypeSignal, Kind: kind, Key: key}
}

// Decode parses one payload. It rejects payloads that are not JSON objects,
// lack the version, carry another version, have an unknown type, or lack
// what their type needs. Unknown fields are ignored, so later versions may
// add fields without breaking this one.
func Decode(payload string) (Message, error) {
	var m Message
	if err := json.Unmarshal([]byte(payload), &m); err != nil {
		return Message{}, fmt.Errorf("decode bus payload: %w", err)
	}
	if m.V == 0 {
		return Message{}, errors.New(`decode bus payload: missing version field "v"`)
	}
	if m.V != Version {
		return Message{}, fmt.Errorf("decode bus payload: unsupported version %d (this build reads version %d)", m.V, Version)
	}
	if err := m.validate(); err != nil {
		return Message{}, fmt.Errorf("decode bus payload: %w", err)
	}
	return m, nil
}

func (m Message) validate() error {
	switch m.Type {
	case TypeFrame:
		if m.Stream == "" {
			return errors.New("frame without stream")
		}
	case TypeSeqs:
		if len(m.Seqs) == 0 {
			return errors.New("seqs without seqs")
		}
	case TypeSignal:
		if m.Kind == "" {
			return errors.New("signal without kind")
		}
	case "":
		return errors.New(`missing type field "type"`)
	default:
		return fmt.Errorf("unknown type %q", m.Type)
	}
	return nil
}

// Encode returns the payloads that carry m, each at most MaxFrameBytes: a
// frame over the limit loses its data and gets truncated=true; a seqs batch
// over the limit is split into several payloads, in order; a signal over
// the limit is an error. A seqs batch without seqs encodes to no payload. A
// zero V is taken as Version.
func Encode(m Message) ([]string, error) {
	if m.V == 0 {
		m.V = Version
	}
	if m.V != Version {
		return nil, fmt.Errorf("encode bus message: unsupported version %d", m.V)
	}
	if m.Type == TypeSeqs && len(m.Seqs) == 0 {
		return nil, nil
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("encode bus message: %w", err)
	}
	p, err := marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode bus message: %w", err)
	}
	if len(p) <= MaxFrameBytes {
		return []string{p}, nil
	}
	switch m.Type {
	case TypeFrame:
		m.Data, m.Truncated = nil, true
		p, err := marshal(m)
		if err != nil {
			return nil, fmt.Errorf("encode bus message: %w", err)
		}
		if len(p) > MaxFrameBytes {
			return nil, fmt.Errorf("encode bus message: frame of stream %.40q is %d bytes even without data (limit %d)", m.Stream, len(p), MaxFrameBytes)
		}
		return []string{p}, nil
	case TypeSeqs:
		return splitSeqs(m.Seqs), nil
	default:
		return nil, fmt.Errorf("encode bus message: %s signal is %d bytes (limit %d)", m.Kind, len(p), MaxFrameBytes)
	}
}

// marshal is json.Marshal without HTML escaping (which would only make
// payloads longer) and without the trailing newline.
func marshal(m Message) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return "", err
	}
	return string(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
}

// splitSeqs packs seqs greedily into payloads of at most MaxFrameBytes,
// written by hand to know each payload's length exactly.
func splitSeqs(seqs []int64) []string {
	prefix := `{"v":` + strconv.Itoa(Version) + `,"type":"seqs","seqs":[`
	const suffix = "]}"
	var out []string
	b := []byte(prefix)
	n := 0 // seqs in b
	for _, s := range seqs {
		var num [20]byte
		d := strconv.AppendInt(num[:0], s, 10)
		if n > 0 && len(b)+len(",")+len(d)+len(suffix) > MaxFrameBytes {
			out = append(out, string(append(b, suffix...)))
			b, n = []byte(prefix), 0
		}
		if n > 0 {
			b = append(b, ',')
		}
		b = append(b, d...)
		n++
	}
	return append(out, string(append(b, suffix...)))
}

// Execer is what Notify sends through: a pgx.Tx, *pgx.Conn or *pgxpool.Pool.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// notifySQL sends a list of payloads in order, in one statement.
const notifySQL = `SELECT pg_notify($1, p) FROM unnest($2::text[]) WITH ORDINALITY AS t(p, i) ORDER BY i`

// Notify sends m with pg_notify('studio', payload) through q, which should
// be the sender's transaction: listeners receive it when that transaction
// commits, and never if it rolls back. Through a pool or a connection
// outside a transaction, it is delivered at once.
func Notify(ctx context.Context, q Execer, m Message) error {
	payloads, err := Encode(m)
	if err != nil {
		return err
	}
	if len(payloads) == 0 {
		return nil
	}
	if _, err := q.Exec(ctx, notifySQL, Channel, payloads); err != nil {
		return fmt.Errorf("notify %s %s: %w", Channel, m.Type, err)
	}
	return nil
}
