package bus_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/studioctl/studioctl/internal/bus"
)

// FuzzDecode (issue 7, deliverable 10): any payload, as a hostile role's
// pg_notify may send it, is decoded without a panic, or refused with a
// "decode bus payload: " error and a zero Message. What decodes re-encodes
// within the limits (each payload at most MaxFrameBytes) and decodes again
// to the same message: a frame may lose its data to the limit, a batch of
// seqs may be split, and only a signal too long to fit is refused.
// `go test` runs the seeds; see docs/fuzzing.md.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"type":"signal","kind":"replica.drain","key":"web-1"}`,
		`{"v":1,"type":"signal","kind":"job.trigger","key":"nightly-report","sent_by":"r1"}`,
		`{"v":1,"type":"seqs","seqs":[1,2,3,9223372036854775807,-1,0]}`,
		`{"v":1,"type":"frame","stream":"runs","id":"7","event":"run","data":{"a":[1,2,{"b":null}]}}`,
		`{"v":1,"type":"frame","stream":"runs","data":null,"truncated":true}`,
		`{"v":1,"type":"frame","stream":"s","data": { "spaced" : "out" } }`,
		`{"V":1,"TYPE":"signal","KIND":"x","Key":"y"}`,
		`{"v":1,"type":"signal","kind":"a","kind":"b"}`,
		`{"v":1.0,"type":"signal","kind":"x"}`,
		`{"v":1e0,"type":"signal","kind":"x"}`,
		`{"v":2,"type":"signal","kind":"x"}`,
		`{"v":"1","type":"signal","kind":"x"}`,
		`{"v":1,"type":"seqs","seqs":[1.5]}`,
		`{"v":1,"type":"seqs","seqs":[99999999999999999999]}`,
		`{"v":1,"type":"seqs","seqs":null}`,
		`{"v":1,"type":"signal","kind":"\u2028<&>","key":"\ud800"}`,
		"{\"v\":1,\"type\":\"signal\",\"kind\":\"\xff\xfe\"}",
		`{"v":1,"type":"frame","stream":"s","data":"` + strings.Repeat("x", 7400) + `"}`,
		`{"v":1,"type":"signal","kind":"k","key":"` + strings.Repeat("\u2028", 2400) + `"}`,
		`{"v":1,"type":"seqs","seqs":[` + strings.Repeat("1234567,", 900) + `1]}`,
		`[1,2]`, `null`, `{}`, `""`, ``, `{"v":1}`, `{"v":1,"type":"frame"}`, "\x00",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, payload string) {
		m, err := bus.Decode(payload)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "decode bus payload: ") {
				t.Fatalf("error %q does not say what failed", err)
			}
			if !reflect.DeepEqual(m, bus.Message{}) {
				t.Fatalf("Decode returned %+v with an error", m)
			}
			return
		}
		if m.V != bus.Version {
			t.Fatalf("decoded version %d", m.V)
		}
		switch m.Type {
		case bus.TypeFrame, bus.TypeSeqs, bus.TypeSignal:
		default:
			t.Fatalf("decoded type %q", m.Type)
		}
		payloads, err := bus.Encode(m)
		if err != nil {
			// Only a message that cannot fit may be refused.
			if !strings.Contains(err.Error(), "limit ") || m.Type == bus.TypeSeqs {
				t.Fatalf("decoded %+v, but Encode fails: %v", m, err)
			}
			return
		}
		if len(payloads) == 0 {
			t.Fatalf("decoded %+v encodes to nothing", m)
		}
		var seqs []int64
		for _, p := range payloads {
			if len(p) > bus.MaxFrameBytes {
				t.Fatalf("a payload of %d bytes, over MaxFrameBytes %d", len(p), bus.MaxFrameBytes)
			}
			back, err := bus.Decode(p)
			if err != nil {
				t.Fatalf("Encode gave %q, which does not decode: %v", p, err)
			}
			if again, err := bus.Encode(back); err != nil || len(again) != 1 || again[0] != p {
				t.Fatalf("payload %q re-encodes as %q, %v", p, again, err)
			}
			switch m.Type {
			case bus.TypeSignal:
				if !reflect.DeepEqual(back, m) {
					t.Fatalf("signal %+v comes back as %+v", m, back)
				}
			case bus.TypeFrame:
				if back.Stream != m.Stream || back.ID != m.ID || back.Event != m.Event {
					t.Fatalf("frame %+v comes back as %+v", m, back)
				}
				if back.Truncated && !m.Truncated && back.Data != nil {
					t.Fatalf("a frame marked truncated keeps data %s", back.Data)
				}
				if !back.Truncated || m.Truncated {
					if !sameJSON(back.Data, m.Data) {
						t.Fatalf("frame data %s comes back as %s", m.Data, back.Data)
					}
				}
			case bus.TypeSeqs:
				seqs = append(seqs, back.Seqs...)
			}
		}
		if m.Type != bus.TypeSeqs && len(payloads) != 1 {
			t.Fatalf("a %s in %d payloads", m.Type, len(payloads))
		}
		if m.Type == bus.TypeSeqs && !slices.Equal(seqs, m.Seqs) {
			t.Fatalf("seqs %v come back as %v", m.Seqs, seqs)
		}
	})
}

// sameJSON reports whether two raw JSON values are the same once compacted
// (a decoded frame keeps its data as written).
func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}
