package tasks

import (
	"bytes"
	"strings"
	"testing"
)

func TestTailBufferKeepsTheLastBytes(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		want   string
	}{
		{"nothing written is empty", nil, ""},
		{"short output is kept whole", []string{"ab", "cd"}, "abcd"},
		{"exactly max bytes are kept whole", []string{"abcd", "efgh"}, "abcdefgh"},
		{"small writes past max keep the tail", []string{"abc", "def", "ghi"}, "bcdefghi"},
		{"a write larger than max keeps its tail", []string{"ab", "0123456789"}, "23456789"},
		{"a small write after a large one shifts the tail", []string{"0123456789", "xy"}, "456789xy"},
		{"a rune cut at the start is dropped", []string{"aaaaaaa", "é", "bcdefgh"}, "bcdefgh"},
		{"a whole rune at the start is kept", []string{"aaaaaaa", "é", "bcdefg"}, "ébcdefg"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newTailBuffer(8)
			for _, w := range tt.writes {
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
			}
			if got := b.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestTailBufferNeverGrows(t *testing.T) {
	b := newTailBuffer(OutputTailBytes)
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 2048) // 32 KiB, like io.Copy
	for range 64 {
		b.Write(chunk)
		b.Write([]byte("x"))
	}
	if cap(b.buf) != OutputTailBytes {
		t.Errorf("buffer capacity = %d, want %d", cap(b.buf), OutputTailBytes)
	}
	want := string(chunk[len(chunk)-OutputTailBytes+1:]) + "x"
	if got := b.String(); got != want {
		t.Errorf("tail = %q..., want %q...", got[:32], want[:32])
	}
	if !strings.HasSuffix(b.String(), "fx") {
		t.Errorf("tail does not end with the last write")
	}
}
