package output

import (
	"bytes"
	"testing"
	"time"
)

func TestACapturingPrinterKeepsTheRowsAndWritesNothing(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	p := NewCapture(&buf, func() time.Time { return now })
	cols := []Column{{Header: "NAME"}, {Header: "AT", Wide: true}}
	rows := [][]Cell{{{Text: "a", Tone: Bad}, {Text: p.Time(now.Add(-12 * time.Second))}}}
	if err := p.Print([]string{"a"}, cols, rows); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 0 {
		t.Errorf("a capturing printer wrote %q", buf.String())
	}
	c := p.Captured()
	if len(c.Columns) != 2 || len(c.Rows) != 1 || c.Rows[0][0].Tone != Bad || c.Rows[0][1].Text != "12s ago" {
		t.Errorf("captured %+v", c)
	}
	if New(&buf, Table, Options{}).Captured() != nil {
		t.Error("a printer that writes has something captured")
	}
}
