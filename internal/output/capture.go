package output

import (
	"io"
	"time"
)

// Captured is what a capturing printer was handed: the columns and rows of
// the table a list command printed (its last Print).
type Captured struct {
	Columns []Column
	Rows    [][]Cell
}

// NewCapture returns a printer in table format that keeps the columns and
// rows it is handed instead of writing them, with relative times as on a
// terminal and no colour: the list commands' own rows, for a screen that
// draws them itself (studioctl top). What the command writes besides the
// table goes to w.
func NewCapture(w io.Writer, now func() time.Time) *Printer {
	p := New(w, Table, Options{Terminal: true, NoColor: true, Now: now})
	p.capture = &Captured{}
	return p
}

// Captured returns what a printer made by NewCapture was handed; nil for
// any other printer.
func (p *Printer) Captured() *Captured { return p.capture }
