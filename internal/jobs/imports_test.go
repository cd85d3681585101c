package jobs_test

import (
	"go/build"
	"slices"
	"strings"
	"testing"
)

// internal/jobs is the job model and its parsing only (issue 23): binding
// a job to its task lives in internal/jobtask, so the model imports no
// task, no lock provider and no database driver.
func TestTheModelImportsNoTaskLockOrDriver(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if slices.Contains([]string{"internal/tasks", "internal/locks"}, strings.TrimPrefix(imp, "github.com/studioctl/studioctl/")) ||
			strings.HasPrefix(imp, "github.com/jackc/") {
			t.Errorf("internal/jobs imports %s; binding a job to its task belongs to internal/jobtask", imp)
		}
	}
}
