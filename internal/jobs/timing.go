package jobs

import "time"

// The timing rules of SPEC §5.2, from ADR-0125 (seed 000) and the ShedLock
// article (seed 003). Each number is named here and nowhere else.
const (
	// MinimumGapShare: a fixed delay d gives a minimum gap of 90 % of d ...
	MinimumGapShare = 0.9
	// MinimumGapCap: ... but at most five minutes.
	MinimumGapCap = 5 * time.Minute
	// CronMinimumGap is the minimum gap of a cron job.
	CronMinimumGap = 30 * time.Second
	// LockAtMostForFloor: lockAtMostFor is never below one minute.
	LockAtMostForFloor = 60 * time.Second
	// TimeoutFloor: a fixed-delay job's default timeout is at least five minutes ...
	TimeoutFloor = 5 * time.Minute
	// TimeoutIntervals: ... or three intervals, whichever is longer.
	TimeoutIntervals = 3
	// CronTimeout is a cron job's default timeout.
	CronTimeout = time.Hour
	// StalledIntervals: a job with no completion (run or skip) within this many
	// intervals is stalled.
	StalledIntervals = 3
	// InvalidScheduleRetry: a job with a malformed schedule is asked again this often.
	InvalidScheduleRetry = time.Minute
)

// MinimumGap is the shortest time between two runs of a job on any replica:
// min(0.9 d, 5 min) for a fixed delay d, 30 s for a cron.
func MinimumGap(s Schedule) time.Duration {
	if s.IsCron() {
		return CronMinimumGap
	}
	gap := time.Duration(float64(s.Every) * MinimumGapShare)
	return min(gap, MinimumGapCap)
}

// LockAtLeastFor is the minimum gap: a run that ends early keeps the lock
// that long, so another replica's tick does not run the job again at once.
func LockAtLeastFor(s Schedule) time.Duration { return MinimumGap(s) }

// LockAtMostFor is max(60 s, minimum gap): how long a crashed holder can
// block the job. The keep-alive extends it while a run lasts.
func LockAtMostFor(s Schedule) time.Duration { return max(LockAtMostForFloor, MinimumGap(s)) }

// DefaultTimeout is max(5 min, 3 d) for a fixed delay d, and 1 h for a cron.
func DefaultTimeout(s Schedule) time.Duration {
	if s.IsCron() {
		return CronTimeout
	}
	return max(TimeoutFloor, TimeoutIntervals*s.Every)
}

// KeepAliveEvery is how often a running installation job extends its lock:
// half of lockAtMostFor.
func KeepAliveEvery(s Schedule) time.Duration { return LockAtMostFor(s) / 2 }
