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

// A duty's key is joined and split in one place: String and ParseDutyKey
// are each other's inverse for a job id and for job@cluster.
func TestDutyKeyRoundTrips(t *testing.T) {
	tests := []struct {
		id   string
		key  jobs.DutyKey
		duty bool
	}{
		{"sync", jobs.DutyKey{Job: "sync"}, false},
		{"sync@eu-1", jobs.DutyKey{Job: "sync", Cluster: "eu-1"}, true},
		{"sync@eu@1", jobs.DutyKey{Job: "sync", Cluster: "eu@1"}, true}, // split at the first @
	}
	for _, tt := range tests {
		k, duty := jobs.ParseDutyKey(tt.id)
		if k != tt.key || duty != tt.duty {
			t.Errorf("ParseDutyKey(%q) = %+v, %v; want %+v, %v", tt.id, k, duty, tt.key, tt.duty)
		}
		if got := k.String(); got != tt.id {
			t.Errorf("%+v.String() = %q, want %q", k, got, tt.id)
		}
	}
	if k, duty := jobs.ParseDutyKey("sync@"); !duty || k.Job != "sync" || k.Cluster != "" {
		t.Errorf(`ParseDutyKey("sync@") = %+v, %v; want a duty with an empty cluster`, k, duty)
	}
}
