package jobstore

// What the drift benchmark explains (definitions_bench_test.go).
var DriftedSQL = driftedSQL
