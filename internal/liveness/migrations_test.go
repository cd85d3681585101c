package liveness_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/studioctl/studioctl/internal/liveness"
)

// SQL in a migration cannot call LiveSQL: a view or function writes the
// rule out as literal intervals. Every such literal, in every migration,
// must be the rule's numbers, so a change of GoneAfter or FutureTolerance
// fails here until a new migration restates them.
func TestMigrationsWriteTheLivenessRuleWithItsNumbers(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no migrations found: %v", err)
	}
	gone := regexp.MustCompile(`heartbeat_at\s*>\s*now\(\)\s*-\s*interval\s*'(\d+) seconds'`)
	ahead := regexp.MustCompile(`heartbeat_at\s*<=\s*now\(\)\s*\+\s*interval\s*'(\d+) seconds'`)
	found := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			re   *regexp.Regexp
			want time.Duration
			name string
		}{{gone, liveness.GoneAfter, "GoneAfter"}, {ahead, liveness.FutureTolerance, "FutureTolerance"}} {
			for _, m := range c.re.FindAllStringSubmatch(string(b), -1) {
				found++
				n, _ := strconv.Atoi(m[1])
				if got := time.Duration(n) * time.Second; got != c.want {
					t.Errorf("%s: %q is %v, want liveness.%s = %v", filepath.Base(f), m[0], got, c.name, c.want)
				}
			}
		}
	}
	// 00010's view and 00011's function write the rule out; a regexp that
	// matched nothing would pass vacuously.
	if found < 4 {
		t.Fatalf("found %d liveness literals in the migrations, want at least 4 (00010, 00011)", found)
	}
}
