package bus_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/studioctl/studioctl/internal/bus"
)

// pgNotifyLimit is PostgreSQL's limit on a pg_notify payload.
const pgNotifyLimit = 8000

func TestPayloadShapesRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		msg  bus.Message
		want string
	}{
		{
			name: "a frame keeps its data",
			msg:  bus.Frame("jobs", "42", "run.finished", json.RawMessage(`{"seq":42,"state":"ok","note":"<b>&"}`)),
			want: `{"v":1,"type":"frame","stream":"jobs","id":"42","event":"run.finished","data":{"seq":42,"state":"ok","note":"<b>&"}}`,
		},
		{
			name: "a frame without data has no data field",
			msg:  bus.Frame("jobs", "43", "ping", nil),
			want: `{"v":1,"type":"frame","stream":"jobs","id":"43","event":"ping"}`,
		},
		{
			name: "a seqs batch lists its seqs",
			msg:  bus.Seqs(1, 2, 9007199254740993),
			want: `{"v":1,"type":"seqs","seqs":[1,2,9007199254740993]}`,
		},
		{
			name: "a signal has a kind and a key",
			msg:  bus.Signal(bus.KindJobTrigger, "nightly-report"),
			want: `{"v":1,"type":"signal","kind":"job.trigger","key":"nightly-report"}`,
		},
		{
			name: "a signal may have no key",
			msg:  bus.Signal(bus.KindLeasesRebalance, ""),
			want: `{"v":1,"type":"signal","kind":"leases.rebalance"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payloads, err := bus.Encode(tt.msg)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if len(payloads) != 1 || payloads[0] != tt.want {
				t.Fatalf("Encode = %q\nwant [%q]", payloads, tt.want)
			}
			got, err := bus.Decode(payloads[0])
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, tt.msg) {
				t.Fatalf("Decode = %+v\nwant %+v", got, tt.msg)
			}
		})
	}
}

func TestEncodeFillsAMissingVersion(t *testing.T) {
	payloads, err := bus.Encode(bus.Message{Type: "signal", Kind: bus.KindJobSettings, Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(payloads[0], `{"v":1,`) {
		t.Fatalf("payload %q has no version", payloads[0])
	}
}

func TestLargeFrameGoesOutTruncatedWithoutData(t *testing.T) {
	data := json.RawMessage(`{"log":"` + strings.Repeat("x", 10_000) + `"}`)
	payloads, err := bus.Encode(bus.Frame("runs", "7", "log", data))
	if err != nil {
		t.Fatal(err)
	}
	if len(payloads) != 1 {
		t.Fatalf("got %d payloads, want 1", len(payloads))
	}
	if n := len(payloads[0]); n > bus.MaxFrameBytes || n >= pgNotifyLimit {
		t.Fatalf("payload is %d bytes", n)
	}
	m, err := bus.Decode(payloads[0])
	if err != nil {
		t.Fatal(err)
	}
	want := bus.Message{V: 1, Type: "frame", Stream: "runs", ID: "7", Event: "log", Truncated: true}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("got %+v, want %+v", m, want)
	}
}

func TestFrameJustUnderTheLimitKeepsItsData(t *testing.T) {
	empty, _ := bus.Encode(bus.Frame("s", "1", "e", json.RawMessage(`""`)))
	fill := bus.MaxFrameBytes - len(empty[0]) // the payload is exactly the limit
	data := json.RawMessage(`"` + strings.Repeat("y", fill) + `"`)
	payloads, err := bus.Encode(bus.Frame("s", "1", "e", data))
	if err != nil {
		t.Fatal(err)
	}
	if len(payloads[0]) != bus.MaxFrameBytes || strings.Contains(payloads[0], "truncated") {
		t.Fatalf("a payload of exactly %d bytes was changed: %d bytes", bus.MaxFrameBytes, len(payloads[0]))
	}
	data = json.RawMessage(`"` + strings.Repeat("y", fill+1) + `"`)
	payloads, _ = bus.Encode(bus.Frame("s", "1", "e", data))
	if !strings.Contains(payloads[0], `"truncated":true`) {
		t.Fatalf("a payload one byte over the limit was not truncated")
	}
}

func TestLargeSeqsBatchIsSplitInOrder(t *testing.T) {
	var seqs []int64
	for i := range 5000 {
		seqs = append(seqs, 1_000_000_000_000+int64(i))
	}
	payloads, err := bus.Encode(bus.Seqs(seqs...))
	if err != nil {
		t.Fatal(err)
	}
	if len(payloads) < 2 {
		t.Fatalf("got %d payloads, want several", len(payloads))
	}
	var got []int64
	for _, p := range payloads {
		if len(p) > bus.MaxFrameBytes {
			t.Fatalf("payload of %d bytes", len(p))
		}
		m, err := bus.Decode(p)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m.Seqs...)
	}
	if !reflect.DeepEqual(got, seqs) {
		t.Fatalf("seqs changed through splitting")
	}
	// Every payload but the last is full: no room for one more seq.
	for _, p := range payloads[:len(payloads)-1] {
		if len(p)+len(",1000000000000") <= bus.MaxFrameBytes {
			t.Fatalf("payload of %d bytes had room for more", len(p))
		}
	}
}

func TestEmptySeqsBatchEncodesToNothing(t *testing.T) {
	payloads, err := bus.Encode(bus.Seqs())
	if err != nil || len(payloads) != 0 {
		t.Fatalf("Encode(Seqs()) = %q, %v; want nothing", payloads, err)
	}
}

func TestEncodeRejects(t *testing.T) {
	tests := []struct {
		name string
		msg  bus.Message
		want string
	}{
		{"a signal over the limit", bus.Signal(bus.KindJobTrigger, strings.Repeat("k", bus.MaxFrameBytes)), "limit"},
		{"a frame whose header alone is over the limit", bus.Frame(strings.Repeat("s", bus.MaxFrameBytes), "1", "e", nil), "even without data"},
		{"a frame whose data is not JSON", bus.Frame("s", "1", "e", json.RawMessage(`{not json`)), "invalid character"},
		{"an unknown type", bus.Message{V: 1, Type: "blob"}, `unknown type "blob"`},
		{"a signal without kind", bus.Signal("", "k"), "signal without kind"},
		{"a frame without stream", bus.Frame("", "1", "e", nil), "frame without stream"},
		{"another version", bus.Message{V: 2, Type: "signal", Kind: "x"}, "unsupported version 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payloads, err := bus.Encode(tt.msg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Encode = %d payloads, %v; want an error containing %q", len(payloads), err, tt.want)
			}
		})
	}
}

func TestDecodeRejectsGarbage(t *testing.T) {
	tests := []struct {
		name, payload, want string
	}{
		{"plain text", "hello", "invalid character"},
		{"an empty payload", "", "unexpected end of JSON input"},
		{"a JSON array", `[1,2]`, "cannot unmarshal array"},
		{"no version", `{"type":"signal","kind":"job.trigger"}`, `missing version field "v"`},
		{"a later version", `{"v":2,"type":"signal","kind":"job.trigger"}`, "unsupported version 2"},
		{"no type", `{"v":1,"kind":"job.trigger"}`, `missing type field "type"`},
		{"an unknown type", `{"v":1,"type":"gossip"}`, `unknown type "gossip"`},
		{"a version of the wrong type", `{"v":"1","type":"signal","kind":"x"}`, "cannot unmarshal string"},
		{"seqs that are not numbers", `{"v":1,"type":"seqs","seqs":["a"]}`, "cannot unmarshal string"},
		{"seqs without seqs", `{"v":1,"type":"seqs","seqs":[]}`, "seqs without seqs"},
		{"a frame without stream", `{"v":1,"type":"frame","id":"1"}`, "frame without stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := bus.Decode(tt.payload)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Decode = %+v, %v; want an error containing %q", m, err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "decode bus payload: ") {
				t.Fatalf("error %q does not say what failed", err)
			}
		})
	}
}

func TestDecodeIgnoresUnknownFields(t *testing.T) {
	m, err := bus.Decode(`{"v":1,"type":"signal","kind":"job.trigger","key":"a","sent_by":"r1"}`)
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind != bus.KindJobTrigger || m.Key != "a" {
		t.Fatalf("got %+v", m)
	}
}
