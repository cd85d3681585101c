// Package e2estream holds the measurements of the event stream
// (docs/benchmarks.md, "Event stream") against real `studioctl run`
// processes: frame latency from a run's end to an SSE client, and 200
// concurrent SSE clients on one replica. They are opt-in
// (STUDIO_BENCH_STREAM=1); the package has no other tests.
package e2estream
