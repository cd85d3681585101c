// Package leases gives each cluster one owning replica (SPEC §7): rendezvous
// placement over the live, ready replicas, a loop that renews, releases and
// claims rows of cluster_lease, and a local trust window that cancels a
// cluster's duties before any other replica may claim it. docs/leases.md
// describes the numbers and statements.
package leases

import (
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
)

// Weight is the rendezvous weight of replica for cluster: FNV-1a 64 of
// cluster + "\x00" + replica, put through MurmurHash3's 64-bit finaliser
// (fmix64) so that names that differ only in their last byte spread over
// all 64 bits. It is fixed: every replica and the CLI must compute the same
// value, and changing it moves clusters on upgrade.
func Weight(cluster, replica string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(cluster))
	h.Write([]byte{0})
	h.Write([]byte(replica))
	return fmix64(h.Sum64())
}

func fmix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}

// Place returns the replica that rendezvous hashing picks for cluster among
// replicas (the live, ready ones): the highest Weight, and of equal weights
// the smallest id. It returns "" when replicas is empty.
func Place(cluster string, replicas []string) string {
	best, bestW := "", uint64(0)
	for _, r := range replicas {
		w := Weight(cluster, r)
		if best == "" || w > bestW || (w == bestW && r < best) {
			best, bestW = r, w
		}
	}
	return best
}

// MaxClusterBytes is the longest cluster name.
const MaxClusterBytes = 128

var clusterPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]*$`)

// ErrInvalid: a cluster name that is not allowed (a usage error, exit 2).
var ErrInvalid = errors.New("invalid cluster name")

// ValidateCluster checks a cluster name: 1 to 128 bytes of letters, digits
// and . _ : / -, starting with a letter or digit.
func ValidateCluster(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: cluster name is empty", ErrInvalid)
	case len(name) > MaxClusterBytes:
		return fmt.Errorf("%w: cluster %q is %d bytes, at most %d", ErrInvalid, name, len(name), MaxClusterBytes)
	case !clusterPattern.MatchString(name):
		return fmt.Errorf("%w: cluster %q: use letters, digits and . _ : / -, starting with a letter or digit", ErrInvalid, name)
	}
	return nil
}
