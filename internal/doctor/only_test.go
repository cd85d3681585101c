package doctor

import (
	"context"
	"errors"
	"slices"
	"testing"
)

func TestOnlyRunsTheNamedChecksInTheirOrder(t *testing.T) {
	t.Parallel()
	rs := Run(context.Background(), Options{OpenErr: errors.New("unreachable"), Only: []string{CheckFailingJobs, CheckStaleLocks}})
	var got []string
	for _, r := range rs {
		got = append(got, r.Check)
	}
	if want := []string{CheckStaleLocks, CheckFailingJobs}; !slices.Equal(got, want) {
		t.Errorf("checks run: %v, want %v", got, want)
	}
}
