package natsort

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestCompare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		a, b string
		want int
	}{
		{"equal names are equal", "c1", "c1", 0},
		{"empty sorts first", "", "a", -1},
		{"a single digit before two digits", "c2", "c10", -1},
		{"numbers compare by value", "c10", "c9", 1},
		{"text compares byte by byte", "alpha", "beta", -1},
		{"a prefix sorts first", "cluster-sync", "cluster-sync@c1", -1},
		{"the number decides after an equal prefix", "cluster-sync@c2", "cluster-sync@c12", -1},
		{"a later number decides when the first is equal", "web-1.10", "web-1.9", 1},
		{"leading zeros do not change the value", "c007", "c8", -1},
		{"equal values with leading zeros fall back to bytes", "c01", "c1", -1},
		{"more zeros with an equal value, bytes decide", "c001", "c01", -1},
		{"zero against zeros, bytes decide", "c0", "c00", -1},
		{"digits sort before letters, as in ASCII", "c1", "ca", -1},
		{"a number before text at the same place", "1a", "a1", -1},
		{"mixed text and numbers", "a10b2", "a10b10", -1},
		{"digit runs longer than int64 compare by value", "n99999999999999999999999", "n100000000000000000000000", -1},
		{"long digit runs of equal length compare by digits", "n18446744073709551617", "n18446744073709551616", 1},
		{"long runs with leading zeros", "n0000000000000000000000000001", "n2", -1},
		{"upper case before lower case, as bytes", "B", "a", -1},
		{"non-ASCII compares as bytes", "é1", "é10", -1},
		{"text after a number", "c1-b", "c1-a", 1},
		{"number then end", "c1", "c1x", -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Compare(tt.a, tt.b); got != tt.want {
				t.Errorf("Compare(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
			}
			if got := Compare(tt.b, tt.a); got != -tt.want {
				t.Errorf("Compare(%q, %q) = %d, want %d (antisymmetric)", tt.b, tt.a, got, -tt.want)
			}
		})
	}
}

func TestStringsSortsClustersAsAPersonReads(t *testing.T) {
	t.Parallel()
	want := []string{"cluster-sync@c1", "cluster-sync@c2", "cluster-sync@c3", "cluster-sync@c4", "cluster-sync@c5", "cluster-sync@c6",
		"cluster-sync@c7", "cluster-sync@c8", "cluster-sync@c9", "cluster-sync@c10", "cluster-sync@c11", "cluster-sync@c12", "report"}
	got := slices.Clone(want)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(got), func(i, j int) { got[i], got[j] = got[j], got[i] })
	Strings(got)
	if !slices.Equal(got, want) {
		t.Errorf("sorted:\n%q\nwant:\n%q", got, want)
	}
}

// TestCompareIsATotalOrder checks, over names built from a few pieces,
// that Compare is 0 only for equal strings, antisymmetric and transitive,
// so every sort with it is deterministic.
func TestCompareIsATotalOrder(t *testing.T) {
	t.Parallel()
	pieces := []string{"", "0", "00", "1", "01", "9", "10", "a", "b", "-", "c"}
	var names []string
	for _, x := range pieces {
		for _, y := range pieces {
			for _, z := range pieces {
				names = append(names, x+y+z)
			}
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	for _, a := range names {
		for _, b := range names {
			c := Compare(a, b)
			if (c == 0) != (a == b) {
				t.Fatalf("Compare(%q, %q) = %d", a, b, c)
			}
			if Compare(b, a) != -c {
				t.Fatalf("Compare(%q, %q) is not antisymmetric", a, b)
			}
		}
	}
	sorted := slices.Clone(names)
	Strings(sorted)
	for i := 0; i+1 < len(sorted); i++ {
		for j := i + 1; j < len(sorted); j++ {
			if Compare(sorted[i], sorted[j]) >= 0 {
				t.Fatalf("not transitive: %q sorts before %q but Compare says %d", sorted[i], sorted[j], Compare(sorted[i], sorted[j]))
			}
		}
	}
}
