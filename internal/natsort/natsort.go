// Package natsort orders names that hold numbers the way a person reads
// them: c1, c2, ..., c10, web-9 before web-10. Every list studioctl prints
// (jobs, replicas, locks, leases, clusters, the status page, doctor's
// names) sorts with Compare.
//
// A run of ASCII digits compares by its value, of any length (no integer
// conversion, so runs longer than int64 compare right); everything else
// compares byte by byte. Names equal in that order ("c01" and "c1") are
// ordered by plain byte comparison, so Compare is a total order and a sort
// is deterministic.
package natsort

import (
	"cmp"
	"slices"
	"strings"
)

// Compare returns -1, 0 or +1 as a sorts before, equal to, or after b in
// natural order. It is 0 only when a == b.
func Compare(a, b string) int {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		ca, cb := a[i], b[j]
		if isDigit(ca) && isDigit(cb) {
			ea, eb := digitsEnd(a, i), digitsEnd(b, j)
			// Leading zeros do not change the value.
			na, nb := strings.TrimLeft(a[i:ea], "0"), strings.TrimLeft(b[j:eb], "0")
			if c := cmp.Compare(len(na), len(nb)); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			i, j = ea, eb
			continue
		}
		if ca != cb {
			return cmp.Compare(ca, cb)
		}
		i++
		j++
	}
	if c := cmp.Compare(len(a)-i, len(b)-j); c != 0 {
		return c // the one that ran out first is a prefix: it sorts first
	}
	return strings.Compare(a, b)
}

// Strings sorts s in natural order.
func Strings(s []string) { slices.SortFunc(s, Compare) }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func digitsEnd(s string, i int) int {
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return i
}
