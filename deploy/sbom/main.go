// Command sbom writes a CycloneDX 1.5 JSON SBOM of a release archive: it
// finds the studioctl binary in a .tar.gz or a binary file, reads the
// module build information Go embeds in it (the main module, every
// dependency and its checksum, the Go version and the build settings),
// and lists them as components with package URLs. goreleaser runs it for
// each archive (.goreleaser.yaml, sboms:), so no SBOM tool has to be
// installed:
//
//	go run ./deploy/sbom ARTIFACT DOCUMENT [VERSION]
//
// VERSION, when given, is the application's version (the release's tag);
// otherwise the one Go recorded.
package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/rand"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"
)

func main() {
	if len(os.Args) != 3 && len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: sbom ARTIFACT DOCUMENT [VERSION]")
		os.Exit(2)
	}
	version := ""
	if len(os.Args) == 4 {
		version = os.Args[3]
	}
	if err := run(os.Args[1], os.Args[2], version); err != nil {
		fmt.Fprintf(os.Stderr, "sbom: %v\n", err)
		os.Exit(1)
	}
}

// component is a CycloneDX component.
type component struct {
	Type    string     `json:"type"`
	BOMRef  string     `json:"bom-ref,omitempty"`
	Name    string     `json:"name"`
	Version string     `json:"version,omitempty"`
	PURL    string     `json:"purl,omitempty"`
	Hashes  []hash     `json:"hashes,omitempty"`
	Props   []property `json:"properties,omitempty"`
}

type hash struct {
	Alg     string `json:"alg"`
	Content string `json:"content"`
}

type property struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type bom struct {
	BOMFormat    string `json:"bomFormat"`
	SpecVersion  string `json:"specVersion"`
	SerialNumber string `json:"serialNumber"`
	Version      int    `json:"version"`
	Metadata     struct {
		Timestamp string    `json:"timestamp"`
		Component component `json:"component"`
	} `json:"metadata"`
	Components   []component `json:"components"`
	Dependencies []struct {
		Ref       string   `json:"ref"`
		DependsOn []string `json:"dependsOn"`
	} `json:"dependencies"`
}

func run(artifact, document, version string) error {
	bin, cleanup, err := binaryOf(artifact)
	if err != nil {
		return err
	}
	defer cleanup()
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("%s: read build information: %w", artifact, err)
	}
	b := bom{BOMFormat: "CycloneDX", SpecVersion: "1.5", SerialNumber: "urn:uuid:" + uuid(), Version: 1}
	b.Metadata.Timestamp = time.Now().UTC().Format(time.RFC3339)
	if version == "" {
		version = bi.Main.Version
	}
	app := component{Type: "application", Name: bi.Main.Path, Version: version, PURL: purl(bi.Main.Path, version)}
	app.BOMRef = app.PURL
	app.Props = append(app.Props, property{"go.version", bi.GoVersion}, property{"artifact", filepath.Base(artifact)})
	for _, s := range bi.Settings {
		app.Props = append(app.Props, property{"go.build." + s.Key, s.Value})
	}
	b.Metadata.Component = app
	dep := struct {
		Ref       string   `json:"ref"`
		DependsOn []string `json:"dependsOn"`
	}{Ref: app.BOMRef, DependsOn: []string{}}
	for _, d := range bi.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		c := component{Type: "library", Name: m.Path, Version: m.Version, PURL: purl(m.Path, m.Version)}
		c.BOMRef = c.PURL
		if h := goSum(m); h != nil {
			c.Hashes = []hash{*h}
		}
		b.Components = append(b.Components, c)
		dep.DependsOn = append(dep.DependsOn, c.BOMRef)
	}
	b.Dependencies = append(b.Dependencies, dep)
	out, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(document, append(out, '\n'), 0o644)
}

// goSum turns a go.sum hash (h1:base64 of a SHA-256) into a CycloneDX
// hash; nil when there is none.
func goSum(m *debug.Module) *hash {
	if !strings.HasPrefix(m.Sum, "h1:") {
		return nil
	}
	h := hexOf(strings.TrimPrefix(m.Sum, "h1:"))
	if h == "" {
		return nil
	}
	return &hash{Alg: "SHA-256", Content: h}
}

// hexOf is the hex of a base64 string ("" when it does not decode).
func hexOf(b64 string) string {
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%x", b)
}

func purl(path, version string) string {
	return "pkg:golang/" + path + "@" + version
}

// binaryOf returns the path of the studioctl binary in artifact (a
// .tar.gz archive, or the binary itself), extracted to a temporary file.
func binaryOf(artifact string) (string, func(), error) {
	if !strings.HasSuffix(artifact, ".tar.gz") {
		return artifact, func() {}, nil
	}
	f, err := os.Open(artifact)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", artifact, err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return "", nil, fmt.Errorf("%s: no studioctl binary in the archive", artifact)
		}
		if err != nil {
			return "", nil, fmt.Errorf("%s: %w", artifact, err)
		}
		if filepath.Base(h.Name) != "studioctl" || h.Typeflag != tar.TypeReg {
			continue
		}
		tmp, err := os.CreateTemp("", "sbom-studioctl-")
		if err != nil {
			return "", nil, err
		}
		if _, err := io.Copy(tmp, tr); err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			return "", nil, err
		}
		tmp.Close()
		return tmp.Name(), func() { os.Remove(tmp.Name()) }, nil
	}
}

func uuid() string {
	b := make([]byte, 16)
	rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
