package jobstore

// What the occurrence benchmark explains (occurrences_bench_test.go).
var (
	OccurrenceSummarySQL  = occurrenceSummarySQL
	OccurrenceSummaryArgs = occurrenceSummaryArgs
)
