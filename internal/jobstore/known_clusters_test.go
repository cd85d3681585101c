package jobstore_test

import (
	"errors"
	"testing"

	"github.com/studioctl/studioctl/internal/jobstore"
)

// A clusters: owned job reports one status row per cluster, keyed
// job@cluster: any of them makes the job known by its own id, and no
// other job shares the prefix by accident.
func TestAPerClusterJobIsKnownByItsDutyRows(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	reportJob(t, pool, "compact@eu-1")
	if err := jobstore.Known(t.Context(), pool, "compact"); err != nil {
		t.Errorf("Known(compact) = %v, want nil", err)
	}
	if err := jobstore.Known(t.Context(), pool, "compac"); !errors.Is(err, jobstore.ErrUnknownJob) {
		t.Errorf("Known(compac) = %v, want ErrUnknownJob", err)
	}
}
