package output

import (
	"fmt"
	"io"
	"testing"
	"time"
)

// benchRows are 10,000 rows shaped like locks list's.
func benchRows() ([]Column, [][]Cell) {
	cols := []Column{{Header: "NAME"}, {Header: "STATE"}, {Header: "LOCKED BY"}, {Header: "HOLDER"}, {Header: "LOCKED AT"}, {Header: "LOCK UNTIL"}, {Header: "REMAINING"}}
	rows := make([][]Cell, 10000)
	for i := range rows {
		rows[i] = []Cell{{Text: fmt.Sprintf("job-%05d", i)}, {Text: "held", Tone: Warn}, {Text: fmt.Sprintf("replica-%d", i%20)},
			{Text: "live", Tone: Good}, {Text: "1m0s ago"}, {Text: "in 59m59s"}, {Text: "59m59s"}}
	}
	return cols, rows
}

func BenchmarkTable10k(b *testing.B) {
	cols, rows := benchRows()
	for _, tt := range []struct {
		name string
		opts Options
	}{
		{"piped", Options{}},
		{"terminal", Options{Terminal: true, Now: time.Now}},
		{"terminal-nocolor", Options{Terminal: true, NoColor: true}},
	} {
		b.Run(tt.name, func(b *testing.B) {
			for b.Loop() {
				if err := New(io.Discard, Table, tt.opts).Print(nil, cols, rows); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
