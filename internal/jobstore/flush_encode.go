package jobstore

// The flush's parameters, encoded by the store itself into buffers it keeps
// from one flush to the next (issue 28, part 3).
//
// Through pgx, every flush rebuilt its parameters from nothing: pgx encodes
// a statement's arguments into a buffer it drops once it holds more than
// 256 bytes, so a flush of 3,000 runs grew one from 256 bytes to a
// megabyte, doubling, for each of its three statements, and boxed a value
// per element on the way. At 10,000 jobs that was a third of the bytes the
// process allocated (docs/benchmarks.md, "10,000 jobs: close to the
// floor"). Here each column is written as PostgreSQL's binary array (the
// same bytes pgx sends: TestFlushEncoderWritesThePgxBytes) into a buffer of
// the store's, and the statement goes to pgconn with its parameters
// already encoded, as an unnamed statement with the parameter types given
// (so it works the same behind a pooler in transaction mode).

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/jobs"
)

// PostgreSQL's type OIDs of the flush's elements and arrays.
const (
	oidBool        = 16
	oidInt8        = 20
	oidText        = 25
	oidTimestamptz = 1184
	oidJSONB       = 3802

	oidBoolArray        = 1000
	oidTextArray        = 1009
	oidInt8Array        = 1016
	oidTimestamptzArray = 1185
	oidJSONBArray       = 3807
)

// flushKeepBytes is the largest buffer a flush keeps for the next one (a
// kept buffer counts twice in the RSS: once, and once in the GC's goal): a
// flush after an outage (50,000 rows) does not leave its buffers behind.
const flushKeepBytes = 1 << 20

// microsecY2K is 2000-01-01 UTC in microseconds since 1970: a timestamptz
// is sent as microseconds since 2000-01-01.
const microsecY2K = 946_684_800 * 1_000_000

// binArray is one one-dimensional array parameter in PostgreSQL's binary
// format: a header (dimensions, null flag, element type, length, lower
// bound), then each element as its length and its bytes (-1: NULL).
type binArray struct {
	buf     []byte
	n       int32
	hasNull bool
	elem    int // start of the element being appended (beginElem)
}

// reset starts an empty array of elements of type oid; nothing of the
// array before it stays.
func (a *binArray) reset(oid uint32) {
	if cap(a.buf) > flushKeepBytes {
		a.buf = nil
	}
	a.buf = binary.BigEndian.AppendUint32(a.buf[:0], 1) // one dimension
	a.buf = binary.BigEndian.AppendUint32(a.buf, 0)     // no NULL (bytes() sets it)
	a.buf = binary.BigEndian.AppendUint32(a.buf, oid)
	a.buf = binary.BigEndian.AppendUint32(a.buf, 0) // length (bytes() sets it)
	a.buf = binary.BigEndian.AppendUint32(a.buf, 1) // lower bound
	a.n, a.hasNull = 0, false
}

func (a *binArray) text(s string) {
	a.buf = binary.BigEndian.AppendUint32(a.buf, uint32(len(s)))
	a.buf = append(a.buf, s...)
	a.n++
}

func (a *binArray) int8(v int64) {
	a.buf = binary.BigEndian.AppendUint32(a.buf, 8)
	a.buf = binary.BigEndian.AppendUint64(a.buf, uint64(v))
	a.n++
}

func (a *binArray) bool(v bool) {
	b := byte(0)
	if v {
		b = 1
	}
	a.buf = append(binary.BigEndian.AppendUint32(a.buf, 1), b)
	a.n++
}

// time appends t as pgx does (pgtype.Timestamptz, finite).
func (a *binArray) time(t time.Time) {
	us := t.Unix()*1_000_000 + int64(t.Nanosecond())/1000 - microsecY2K
	a.buf = binary.BigEndian.AppendUint32(a.buf, 8)
	a.buf = binary.BigEndian.AppendUint64(a.buf, uint64(us))
	a.n++
}

func (a *binArray) null() {
	a.buf = binary.BigEndian.AppendUint32(a.buf, 0xffffffff)
	a.hasNull = true
	a.n++
}

// beginElem starts an element whose bytes the caller appends to a.buf;
// endElem writes its length.
func (a *binArray) beginElem() {
	a.elem = len(a.buf)
	a.buf = append(a.buf, 0, 0, 0, 0)
}

func (a *binArray) endElem() {
	binary.BigEndian.PutUint32(a.buf[a.elem:], uint32(len(a.buf)-a.elem-4))
	a.n++
}

// bytes is the array as sent; valid until the next reset.
func (a *binArray) bytes() []byte {
	if a.hasNull {
		binary.BigEndian.PutUint32(a.buf[4:], 1)
	}
	binary.BigEndian.PutUint32(a.buf[12:], uint32(a.n))
	return a.buf
}

// The runs upsert's columns, in upsertRunsSQL's parameter order.
const runColumns = 13

var runOIDs = []uint32{oidInt8Array, oidTextArray, oidTextArray, oidTextArray, oidTimestamptzArray, oidTimestamptzArray,
	oidTextArray, oidTextArray, oidTextArray, oidTimestamptzArray, oidTextArray, oidBoolArray, oidBoolArray}

var eventOIDs = []uint32{oidJSONBArray, oidTextArray}

// statusEncoder appends one status column's value of st to a.
type statusEncoder struct {
	oid uint32 // of the array
	add func(a *binArray, st *jobs.Status)
}

// statusEncoders are statusTable's columns after replica_id, each with the
// same value as its statusArray (columns.go) gives pgx.
var statusEncoders = func() []statusEncoder {
	out := make([]statusEncoder, 0, len(statusTable)-1)
	for _, c := range statusTable[1:] {
		switch e := c.array(0).(type) {
		case *elemArray[pgText]:
			out = append(out, statusEncoder{oidTextArray, func(a *binArray, st *jobs.Status) { a.text(string(e.get(st))) }})
		case *elemArray[pgInt8]:
			out = append(out, statusEncoder{oidInt8Array, func(a *binArray, st *jobs.Status) { a.int8(int64(e.get(st))) }})
		case *elemArray[pgBool]:
			out = append(out, statusEncoder{oidBoolArray, func(a *binArray, st *jobs.Status) { a.bool(bool(e.get(st))) }})
		case *elemArray[pgTime]:
			out = append(out, statusEncoder{oidTimestamptzArray, func(a *binArray, st *jobs.Status) {
				if v := e.get(st); v.null {
					a.null()
				} else {
					a.time(v.t)
				}
			}})
		default:
			panic(fmt.Sprintf("jobstore: status column %s has no binary encoder", c.name))
		}
	}
	return out
}()

// statusOIDs are the status upsert's parameter types: the replica id, then
// statusEncoders'.
var statusOIDs = func() []uint32 {
	out := []uint32{oidText}
	for _, e := range statusEncoders {
		out = append(out, e.oid)
	}
	return out
}()

// flushEncoder holds the buffers one flush encodes into and the next one
// reuses; mu makes flushes take turns (the writer's loop and a Flush of
// Stop or a test).
type flushEncoder struct {
	mu       sync.Mutex
	runs     [runColumns]binArray
	events   binArray // jsonb[]: each element is jsonb's version byte and the JSON
	payloads binArray
	replica  []byte
	status   []binArray
	params   [][]byte
	formats  []int16
	seqs     []int64
	changed  []int64
}

// binaryFormats is n binary format codes.
func (e *flushEncoder) binaryFormats(n int) []int16 {
	for len(e.formats) < n {
		e.formats = append(e.formats, 1)
	}
	return e.formats[:n]
}

// encodeRuns writes runs into e.runs and e.seqs, and reports whether the
// upsert must also record a duty's end (upsertRunsDutyEndsSQL).
func (e *flushEncoder) encodeRuns(runs map[int64]jobs.Run) (dutyEnds bool) {
	a := &e.runs
	for i, oid := range runOIDs {
		a[i].reset(elemOID(oid))
	}
	e.seqs = e.seqs[:0]
	for _, r := range runs {
		if r.Cluster != "" && r.FinishedAt != nil {
			dutyEnds = true
		}
		e.seqs = append(e.seqs, r.Seq)
		a[0].int8(r.Seq)
		a[1].text(r.JobID)
		a[2].text(r.ReplicaID)
		a[3].text(r.Cluster)
		a[4].time(r.StartedAt)
		if r.FinishedAt == nil {
			a[5].null()
		} else {
			a[5].time(*r.FinishedAt)
		}
		a[6].text(string(r.Outcome))
		a[7].text(r.Error)
		a[8].text(r.OutputTail)
		if r.NominalAt.IsZero() {
			a[9].null()
		} else {
			a[9].time(r.NominalAt)
		}
		a[10].text(r.ScopeKey)
		a[11].bool(r.Triggered)
		a[12].bool(r.Backfill)
	}
	e.params = e.params[:0]
	for i := range a {
		e.params = append(e.params, a[i].bytes())
	}
	return dutyEnds
}

// encodeEvents writes the events of the changed runs and the bus payloads
// of the flushed seqs into e.events and e.payloads.
func (e *flushEncoder) encodeEvents(runs map[int64]jobs.Run, payloads []string) {
	e.events.reset(oidJSONB)
	for _, n := range e.changed {
		e.events.beginElem()
		e.events.buf = append(e.events.buf, 1) // jsonb's binary format version
		e.events.buf = appendRunEvent(e.events.buf, runs[n])
		e.events.endElem()
	}
	e.payloads.reset(oidText)
	for _, p := range payloads {
		e.payloads.text(p)
	}
	e.params = append(e.params[:0], e.events.bytes(), e.payloads.bytes())
}

// encodeStatus writes the status upsert's parameters.
func (e *flushEncoder) encodeStatus(replicaID string, status map[string]jobs.Status) {
	if len(e.status) != len(statusEncoders) {
		e.status = make([]binArray, len(statusEncoders))
	}
	for i, c := range statusEncoders {
		e.status[i].reset(elemOID(c.oid))
	}
	var st jobs.Status // one copy a flush: &st escapes through c.add
	for _, v := range status {
		st = v
		for i, c := range statusEncoders {
			c.add(&e.status[i], &st)
		}
	}
	e.replica = append(e.replica[:0], replicaID...)
	e.params = append(e.params[:0], e.replica)
	for i := range e.status {
		e.params = append(e.params, e.status[i].bytes())
	}
}

// elemOID is the element type of array type oid.
func elemOID(oid uint32) uint32 {
	switch oid {
	case oidBoolArray:
		return oidBool
	case oidTextArray:
		return oidText
	case oidInt8Array:
		return oidInt8
	case oidTimestamptzArray:
		return oidTimestamptz
	case oidJSONBArray:
		return oidJSONB
	}
	panic(fmt.Sprintf("jobstore: no element type for array type %d", oid))
}

// writeEncoded is write's statements, with the parameters encoded by e.
// ok is false when tx has no connection to send encoded parameters on (a
// test double): write then goes through pgx as before.
func (s *Store) writeEncoded(ctx context.Context, tx pgx.Tx, runs map[int64]jobs.Run, status map[string]jobs.Status) (stmts int64, ok bool, err error) {
	conn := tx.Conn()
	if conn == nil || conn.PgConn() == nil {
		return 0, false, nil
	}
	pc := conn.PgConn()
	e := &s.enc
	if len(runs) > 0 {
		q := upsertRunsSQL
		if e.encodeRuns(runs) {
			q = upsertRunsDutyEndsSQL
		}
		rr := pc.ExecParams(ctx, q, e.params, runOIDs, e.binaryFormats(len(e.params)), e.binaryFormats(1))
		e.changed = e.changed[:0]
		for rr.NextRow() {
			v := rr.Values()
			if len(v) != 1 || len(v[0]) != 8 {
				rr.Close()
				return stmts, true, fmt.Errorf("write job history: unexpected returned seq %x", v)
			}
			e.changed = append(e.changed, int64(binary.BigEndian.Uint64(v[0])))
		}
		if _, err := rr.Close(); err != nil {
			return stmts, true, fmt.Errorf("write job history: %w", err)
		}
		stmts++
		payloads, err := bus.Encode(bus.Seqs(e.seqs...))
		if err != nil {
			return stmts, true, fmt.Errorf("announce job runs: %w", err)
		}
		e.encodeEvents(runs, payloads)
		if _, err := pc.ExecParams(ctx, eventRunsSQL, e.params, eventOIDs, e.binaryFormats(2), nil).Close(); err != nil {
			return stmts, true, fmt.Errorf("announce job runs: %w", err)
		}
		stmts++
	}
	if len(status) > 0 {
		e.encodeStatus(s.replicaID, status)
		if _, err := pc.ExecParams(ctx, upsertStatusSQL, e.params, statusOIDs, e.binaryFormats(len(e.params)), nil).Close(); err != nil {
			return stmts, true, fmt.Errorf("write job status: %w", err)
		}
		stmts++
	}
	return stmts, true, nil
}

// spareMaxRows is the most rows a flushed map may have held and still be
// kept, cleared, for the pending rows after the next flush.
const spareMaxRows = FlushBatch

// takeSpares returns empty maps for the pending runs and status: those a
// flush before cleared, or new ones. s.mu held.
func (s *Store) takeSpares() (map[int64]jobs.Run, map[string]jobs.Status) {
	runs, status := s.spareRuns, s.spareStatus
	s.spareRuns, s.spareStatus = nil, nil
	if runs == nil {
		runs = map[int64]jobs.Run{}
	}
	if status == nil {
		status = map[string]jobs.Status{}
	}
	return runs, status
}

// keepSpares clears the maps a flush took, once it wrote them or put them
// back, and keeps them for the next flush unless they grew large. A map
// growing from empty at every flush was a tenth of the bytes the process
// allocated at 10,000 jobs.
func (s *Store) keepSpares(runs map[int64]jobs.Run, status map[string]jobs.Status) {
	keepRuns, keepStatus := len(runs) <= spareMaxRows, len(status) <= spareMaxRows
	clear(runs)
	clear(status)
	s.mu.Lock()
	defer s.mu.Unlock()
	if keepRuns {
		s.spareRuns = runs
	}
	if keepStatus {
		s.spareStatus = status
	}
}
