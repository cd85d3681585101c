package jobstore

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/jobs"
)

// Every stored field of jobs.Status has exactly one column in statusTable,
// so the reads, the scan and the upsert cannot drift apart: a field added
// to Status without a column fails here.
func TestTheStatusTableCoversEveryStoredFieldOnce(t *testing.T) {
	var st jobs.Status
	base := reflect.ValueOf(&st).Elem()
	seen := map[uintptr]string{}
	for _, c := range statusTable {
		p := reflect.ValueOf(c.scan(&st))
		if p.Kind() == reflect.Struct { // a textScanner
			p = p.Field(0)
		}
		if prev, dup := seen[p.Pointer()]; dup {
			t.Fatalf("columns %s and %s hold the same field", prev, c.name)
		}
		seen[p.Pointer()] = c.name
	}
	for i := range base.NumField() {
		f := base.Type().Field(i)
		if f.Name == "Since" || f.Name == "Timeout" { // not stored
			continue
		}
		if _, ok := seen[base.Field(i).Addr().Pointer()]; !ok {
			t.Errorf("Status.%s has no column in statusTable", f.Name)
		}
	}
	if n := strings.Count(statusColumns, "s."); n != len(statusTable) {
		t.Errorf("statusColumns names %d columns, want %d", n, len(statusTable))
	}
	if got := len(statusArgs("r", map[string]jobs.Status{"j": {JobID: "j", UpdatedAt: time.Now()}})); got != len(statusTable) {
		t.Errorf("the upsert has %d arguments, want %d", got, len(statusTable))
	}
}
