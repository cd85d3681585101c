package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// maxSyntaxSearchLines bounds SyntaxLine's search: a file longer than this
// keeps the parser's own line.
const maxSyntaxSearchLines = 5000

var yamlLineRe = regexp.MustCompile(`^yaml: line (\d+): `)

// SyntaxLine returns the line of YAML document b where it stops being
// valid YAML, and the parser's message without its own line, for err, a
// syntax error from parsing b. The parser names the line where the
// enclosing block began (a bad indentation on line 4 of a list that begins
// on line 1 says "line 1"); the line after the longest prefix of whole
// lines that still parses is where the document went wrong. ok is false
// when err is not a YAML syntax error.
func SyntaxLine(b []byte, err error) (line int, msg string, ok bool) {
	m := yamlLineRe.FindStringSubmatchIndex(err.Error())
	if m == nil {
		return 0, "", false
	}
	msg = err.Error()[m[1]:]
	line, _ = strconv.Atoi(err.Error()[m[2]:m[3]])
	lines := strings.SplitAfter(string(b), "\n")
	if len(lines) > maxSyntaxSearchLines {
		return line, msg, true
	}
	var n yaml.Node
	for k := len(lines) - 1; k >= 0; k-- {
		if yaml.Unmarshal([]byte(strings.Join(lines[:k], "")), &n) == nil {
			return k + 1, msg, true
		}
	}
	return line, msg, true
}

// parseDocument parses b, the file at path, once; its first syntax error
// names the file and the real line (SyntaxLine).
func parseDocument(path string, b []byte) (*Document, error) {
	var n yaml.Node
	err := yaml.Unmarshal(b, &n)
	if err == nil {
		return NewDocument(path, &n), nil
	}
	if line, msg, ok := SyntaxLine(b, err); ok {
		return nil, &Error{Msg: fmt.Sprintf("config file %s:%d: yaml syntax error: %s", path, line, msg)}
	}
	return nil, &Error{Msg: fmt.Sprintf("config file %s: %v", path, err)}
}

// NewDocument wraps doc, a YAML document parsed from the file at path, as
// Load's Document does (for a parser given bytes of its own).
func NewDocument(path string, doc *yaml.Node) *Document {
	d := &Document{Path: path}
	if doc != nil && len(doc.Content) > 0 {
		d.root = doc.Content[0]
	}
	return d
}
