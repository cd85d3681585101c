package replicaproc

import (
	"os"
	"path/filepath"
	"testing"
)

// The shared build's key follows what the binary is built from: a change
// to a source file, an embedded file or go.sum gives another key (another
// build); a test file or testdata does not (the packages share one).
func TestBuildKeyFollowsTheSourcesNotTheTests(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	write := func(rel, text string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	key := func() string {
		t.Helper()
		k, err := BuildKey(root, true)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write("go.mod", "module example\n")
	write("go.sum", "")
	write("cmd/studioctl/main.go", "package main\n")
	write("migrations/00001_schema.sql", "CREATE TABLE t ();\n")
	k0 := key()
	if k0 != key() {
		t.Fatal("the key of one tree changed between two reads")
	}
	write("internal/x/x_test.go", "package x\n")
	write("internal/x/testdata/golden.txt", "frame\n")
	if k := key(); k != k0 {
		t.Errorf("a test file changed the key")
	}
	for _, change := range []string{"internal/x/x.go", "migrations/00002_more.sql", "go.sum"} {
		write(change, "package x // "+change+"\n")
		if k := key(); k == k0 {
			t.Errorf("a change to %s kept the key", change)
		} else {
			k0 = k
		}
	}
	if k, err := BuildKey(root, false); err != nil || k == k0 {
		t.Errorf("the key without -race = %q (%v); want another than with it", k, err)
	}
}
