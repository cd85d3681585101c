package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/output"
	"github.com/studioctl/studioctl/internal/replicas"
)

// replicasFixture is one live replica with a run going and a lease, and one
// that crashed: every column of replicas list holds a value.
func replicasFixture() ([]replicas.Info, map[string]int) {
	at := func(s string) time.Time {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			panic(err)
		}
		return t
	}
	offset := 0.002
	return []replicas.Info{
		{ID: "web-1", Host: "web-1.example", PID: 4101, Version: "v1.4.0", HTTPAddr: "127.0.0.1:8081", State: replicas.StateReady,
			StartedAt: at("2026-11-30T06:00:00Z"), HeartbeatAt: at("2026-11-30T06:59:58Z"),
			HeartbeatAge: 2 * time.Second, Uptime: time.Hour, RunsInFlight: 2, Live: true, ClockOffset: &offset},
		{ID: "web-2", Host: "web-2.example", PID: 4102, Version: "v1.4.0", State: replicas.StateReady,
			StartedAt: at("2026-11-30T06:10:00Z"), HeartbeatAt: at("2026-11-30T06:40:00Z"),
			HeartbeatAge: 20 * time.Minute, Uptime: 50 * time.Minute, RunsInFlight: 1, Gone: true, Crashed: true},
	}, map[string]int{"web-1": 3}
}

// replicas list prints the same replicas in its table, wide table and JSON;
// a live replica's UPTIME and RUNS are uptime_seconds and runs_in_flight.
func TestReplicasListGoldens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		format output.Format
		want   string
	}{
		{"piped table", output.Table, "ID\tHOST\tVERSION\tSTATE\tHEARTBEAT\tUPTIME\tRUNS\tLEASES\n" +
			"web-1\tweb-1.example\tv1.4.0\tready\t2026-11-30T06:59:58Z\t1h0m\t2\t3\n" +
			"web-2\tweb-2.example\tv1.4.0\tcrashed\t2026-11-30T06:40:00Z\t\t1\t0\n"},
		{"piped wide table", output.Wide, "ID\tHOST\tPID\tVERSION\tSTATE\tHEARTBEAT\tUPTIME\tRUNS\tLEASES\tHTTP\n" +
			"web-1\tweb-1.example\t4101\tv1.4.0\tready\t2026-11-30T06:59:58Z\t1h0m\t2\t3\t127.0.0.1:8081\n" +
			"web-2\tweb-2.example\t4102\tv1.4.0\tcrashed\t2026-11-30T06:40:00Z\t\t1\t0\t\n"},
		{"json", output.JSON, `[
  {
    "id": "web-1",
    "host": "web-1.example",
    "pid": 4101,
    "version": "v1.4.0",
    "state": "ready",
    "started_at": "2026-11-30T06:00:00Z",
    "heartbeat_at": "2026-11-30T06:59:58Z",
    "stopped_at": null,
    "heartbeat_age_seconds": 2,
    "gone": false,
    "crashed": false,
    "uptime_seconds": 3600,
    "runs_in_flight": 2,
    "leases": 3,
    "clock_offset_seconds": 0.002,
    "http_addr": "127.0.0.1:8081"
  },
  {
    "id": "web-2",
    "host": "web-2.example",
    "pid": 4102,
    "version": "v1.4.0",
    "state": "ready",
    "started_at": "2026-11-30T06:10:00Z",
    "heartbeat_at": "2026-11-30T06:40:00Z",
    "stopped_at": null,
    "heartbeat_age_seconds": 1200,
    "gone": true,
    "crashed": true,
    "uptime_seconds": null,
    "runs_in_flight": 1,
    "leases": 0,
    "clock_offset_seconds": null,
    "http_addr": null
  }
]
`},
		{"yaml", output.YAML, `- id: web-1
  host: web-1.example
  pid: 4101
  version: v1.4.0
  state: ready
  started_at: 2026-11-30T06:00:00Z
  heartbeat_at: 2026-11-30T06:59:58Z
  stopped_at: null
  heartbeat_age_seconds: 2
  gone: false
  crashed: false
  uptime_seconds: 3600
  runs_in_flight: 2
  leases: 3
  clock_offset_seconds: 0.002
  http_addr: 127.0.0.1:8081
- id: web-2
  host: web-2.example
  pid: 4102
  version: v1.4.0
  state: ready
  started_at: 2026-11-30T06:10:00Z
  heartbeat_at: 2026-11-30T06:40:00Z
  stopped_at: null
  heartbeat_age_seconds: 1200
  gone: true
  crashed: true
  uptime_seconds: null
  runs_in_flight: 1
  leases: 0
  clock_offset_seconds: null
  http_addr: null
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			infos, leaseCount := replicasFixture()
			p := output.New(&out, tt.format, output.Options{Now: func() time.Time { return testNow }})
			if err := printReplicas(p, infos, leaseCount); err != nil {
				t.Fatal(err)
			}
			if got := out.String(); got != tt.want {
				t.Errorf("replicas list -o %s =\n%s\nwant\n%s", tt.format, got, tt.want)
			}
		})
	}
}

// Every column of replicas list's table (wide included) has its key in
// -o json, so a script never has to parse the table.
func TestReplicasListJSONHasEveryColumnOfTheTable(t *testing.T) {
	t.Parallel()
	keyOf := map[string]string{
		"ID": "id", "HOST": "host", "PID": "pid", "VERSION": "version", "STATE": "state",
		"HEARTBEAT": "heartbeat_at", "UPTIME": "uptime_seconds", "RUNS": "runs_in_flight",
		"LEASES": "leases", "HTTP": "http_addr",
	}
	var out bytes.Buffer
	infos, leaseCount := replicasFixture()
	if err := printReplicas(output.New(&out, output.JSON, output.Options{}), infos, leaseCount); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	for _, c := range replicaColumns {
		key, ok := keyOf[c.Header]
		if !ok {
			t.Errorf("column %s: no JSON key named for it in this test", c.Header)
			continue
		}
		if _, ok := got[0][key]; !ok {
			t.Errorf("column %s: -o json lacks %q", c.Header, key)
		}
	}
}
