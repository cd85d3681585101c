package replicas

import (
	"strings"
	"testing"
)

func TestValidateIDFollowsTheJobIDRuleWithDotsAndUnderscores(t *testing.T) {
	tests := []struct {
		name    string
		id      string
		wantErr string // "" means valid
	}{
		{name: "a plain id is valid", id: "web-1"},
		{name: "a host name with dots is valid", id: "web-1.example.com"},
		{name: "an underscore is valid", id: "web_1"},
		{name: "a digit may come first", id: "1web"},
		{name: "64 bytes are allowed", id: strings.Repeat("a", 64)},
		{name: "65 bytes are too many", id: strings.Repeat("a", 65), wantErr: "65 bytes, at most 64"},
		{name: "300 bytes are too many", id: strings.Repeat("a", 300), wantErr: "300 bytes"},
		{name: "an empty id is refused", id: "", wantErr: "must not be empty"},
		{name: "upper case is refused", id: "Web-1", wantErr: "must match"},
		{name: "a leading dash is refused", id: "-web", wantErr: "must match"},
		{name: "a leading dot is refused", id: ".web", wantErr: "must match"},
		{name: "a space is refused", id: "web 1", wantErr: "must match"},
		{name: "a slash is refused", id: "web/1", wantErr: "must match"},
		{name: "a non-ASCII letter is refused", id: "wéb", wantErr: "must match"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateID(tt.id)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateID(%q) = %v, want nil", tt.id, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ValidateID(%q) = %v, want an error containing %q", tt.id, err, tt.wantErr)
			}
		})
	}
}

func TestDefaultIDPassesValidateID(t *testing.T) {
	if id := DefaultID(); ValidateID(id) != nil {
		t.Fatalf("DefaultID() = %q: %v", id, ValidateID(id))
	}
}

func TestRegisterRefusesAnInvalidID(t *testing.T) {
	e := setup(t)
	defer e.pool.Close()
	r := NewRegistry(e.cfg, e.url, Options{ID: strings.Repeat("x", 256)})
	defer r.Stop()
	err := r.Register(t.Context())
	if err == nil || !strings.Contains(err.Error(), "at most 64") {
		t.Fatalf("Register = %v, want the id refused", err)
	}
	var n int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM studio_replica`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d rows after a refused id, want 0", n)
	}
}
