package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/host"
	"github.com/studioctl/studioctl/internal/testkit/pgtest"
)

// lockedBuffer is a log destination safe for the replica's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// duplicateKeys returns the top-level keys that the JSON object line holds
// more than once (json.Unmarshal would silently keep the last).
func duplicateKeys(t *testing.T, line string) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("log line is not a JSON object: %s", line)
	}
	seen := map[string]bool{}
	var dups []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("log line %s: %v", line, err)
		}
		key := tok.(string)
		if seen[key] {
			dups = append(dups, key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatalf("log line %s: %v", line, err)
		}
	}
	return dups
}

// Every line a replica logs carries each key once: the leases service's
// "leases claimed" and "leases released" lines used to carry replica_id
// twice (the replica's logger's and the service's own).
func TestEveryLogLineOfAReplicaCarriesEachKeyOnce(t *testing.T) {
	url := pgtest.NewDB(t)
	var logs lockedBuffer
	ready := make(chan string, 1)
	h, err := host.New(host.Options{ConnString: url, ID: "keys-1", Version: "test", DrainDelay: host.NoDrainDelay,
		Clusters: []string{"c1", "c2"}, NoHousekeeping: true, OnReady: func(a string) { ready <- a },
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	go prepareStart(context.Background(), h)
	select {
	case <-ready:
	case <-h.Done():
		t.Fatalf("stopped before ready: %v", h.Wait())
	case <-time.After(30 * time.Second):
		t.Fatal("not ready after 30s")
	}
	waitUntil(t, 30*time.Second, "leases claimed", func() bool { return strings.Contains(logs.String(), `"msg":"leases claimed"`) })
	h.Drain("test end")
	if err := h.Wait(); err != nil {
		t.Fatalf("drain: %v", err)
	}
	var claimed, released bool
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if dups := duplicateKeys(t, line); len(dups) > 0 {
			t.Errorf("keys %v more than once in %s", dups, line)
		}
		claimed = claimed || strings.Contains(line, `"msg":"leases claimed"`)
		released = released || strings.Contains(line, `"msg":"leases released`)
		if strings.Contains(line, `"msg":"leases `) && !strings.Contains(line, `"replica_id":"keys-1"`) {
			t.Errorf("a leases line without the replica's id: %s", line)
		}
	}
	if !claimed || !released {
		t.Errorf("want a leases claimed and a leases released line; got:\n%s", logs.String())
	}
}
