package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docs/project-layout.md is the map a newcomer reads first: it names every
// package under internal/, and every package path it names exists.
func TestProjectLayoutMatchesTheTree(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/project-layout.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	pkgs := map[string]bool{}
	err = filepath.WalkDir("../../internal", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			rel, err := filepath.Rel("../..", filepath.Dir(path))
			if err != nil {
				return err
			}
			pkgs[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p := range pkgs {
		if !strings.Contains(doc, "`"+p+"`") {
			t.Errorf("docs/project-layout.md does not name package %s (as `%s`)", p, p)
		}
	}
	for _, m := range regexp.MustCompile("`(internal/[a-z0-9_/]+)`").FindAllStringSubmatch(doc, -1) {
		p := strings.TrimSuffix(m[1], "/")
		if _, err := os.Stat(filepath.Join("../..", p)); err != nil {
			t.Errorf("docs/project-layout.md names %s, which does not exist", p)
		}
	}
}
