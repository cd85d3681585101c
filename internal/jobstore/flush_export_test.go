package jobstore

import "time"

// SetLegacyFlush makes s's flush send its parameters through pgx, as
// before flush_encode.go, so a test can compare the two.
func SetLegacyFlush(s *Store) { s.legacyFlush = true }

// BinArrayForTest encodes values of one type as the flush encodes them;
// for TestFlushEncoderWritesThePgxBytes.
type BinArrayForTest struct{ a binArray }

func (b *BinArrayForTest) Reset(oid uint32) { b.a.reset(oid) }
func (b *BinArrayForTest) Text(s string)    { b.a.text(s) }
func (b *BinArrayForTest) Int8(v int64)     { b.a.int8(v) }
func (b *BinArrayForTest) Bool(v bool)      { b.a.bool(v) }
func (b *BinArrayForTest) Time(t time.Time) { b.a.time(t) }
func (b *BinArrayForTest) Null()            { b.a.null() }
func (b *BinArrayForTest) Bytes() []byte    { return b.a.bytes() }

// PendingStarts is how many starts wait for the next write of starts
// (start.go).
func PendingStarts(s *Store) int {
	s.starts.mu.Lock()
	defer s.starts.mu.Unlock()
	return len(s.starts.pending)
}
