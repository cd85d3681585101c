package jobs_test

import (
	"strings"
	"testing"

	"github.com/studioctl/studioctl/internal/jobs"
)

// A duty's key (job@cluster) is refused with a message that names the job,
// not the pattern: a pause or setting stored under it would be ignored.
func TestValidateIDNamesTheJobOfADutyKey(t *testing.T) {
	err := jobs.ValidateID("sync@c1")
	if err == nil || !strings.Contains(err.Error(), `one cluster's duty of job "sync"`) {
		t.Fatalf("ValidateID(sync@c1) = %v, want the job named", err)
	}
	if err := jobs.ValidateID("Bad@c1"); err == nil || !strings.Contains(err.Error(), "must match") {
		t.Fatalf("ValidateID(Bad@c1) = %v, want the pattern", err)
	}
}
