package leases

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/studioctl/studioctl/internal/config"
)

func TestWeightIsTheDocumentedHash(t *testing.T) {
	// docs/leases.md: fmix64(FNV-1a 64(cluster + "\x00" + replica)). These
	// values were checked against an independent implementation; a change
	// here moves clusters between replicas of different versions.
	for _, tc := range []struct {
		cluster, replica string
		want             uint64
	}{
		{"c1", "r1", 0x85b083d6a2c0fd9d},
		{"", "", 0xb9034ad37056f5fb},
	} {
		if got := Weight(tc.cluster, tc.replica); got != tc.want {
			t.Errorf("Weight(%q, %q) = %#x, want %#x", tc.cluster, tc.replica, got, tc.want)
		}
	}
}

func TestPlaceIgnoresTheOrderOfReplicasAndPicksNobodyFromNone(t *testing.T) {
	a := []string{"r1", "r2", "r3", "r4"}
	b := []string{"r4", "r2", "r1", "r3"}
	for i := range 200 {
		c := fmt.Sprintf("cluster-%d", i)
		if Place(c, a) != Place(c, b) {
			t.Fatalf("%s: %q vs %q", c, Place(c, a), Place(c, b))
		}
	}
	if got := Place("c1", nil); got != "" {
		t.Fatalf("Place over no replica = %q, want empty", got)
	}
}

func replicaIDs(n int) []string {
	var out []string
	for i := 1; i <= n; i++ {
		out = append(out, fmt.Sprintf("web-%d-%04x", i, i*7919))
	}
	return out
}

func clusterNames(n int) []string {
	var out []string
	for i := 1; i <= n; i++ {
		out = append(out, fmt.Sprintf("c%d", i))
	}
	return out
}

func TestPlacementBalancesOneHundredClustersOverFiveReplicas(t *testing.T) {
	live := replicaIDs(5)
	count := map[string]int{}
	for _, c := range clusterNames(100) {
		count[Place(c, live)]++
	}
	lo, hi := 100, 0
	for _, r := range live {
		lo, hi = min(lo, count[r]), max(hi, count[r])
	}
	t.Logf("100 clusters over 5 replicas: %v, max/min %d/%d", count, hi, lo)
	if lo < 10 || hi > 30 {
		t.Fatalf("unbalanced: %v", count)
	}
}

func TestAJoiningReplicaTakesAboutOneNthAndNothingElseMoves(t *testing.T) {
	clusters := clusterNames(1000)
	before, after := replicaIDs(5), replicaIDs(6)
	joined := after[5]
	moved := 0
	for _, c := range clusters {
		was, now := Place(c, before), Place(c, after)
		if was != now {
			moved++
			if now != joined {
				t.Fatalf("%s moved from %s to %s, not to the new replica", c, was, now)
			}
		}
	}
	frac := float64(moved) / float64(len(clusters))
	t.Logf("join 5 -> 6: %d of %d clusters moved (%.3f, ideal %.3f)", moved, len(clusters), frac, 1.0/6)
	if frac < 0.12 || frac > 0.22 {
		t.Fatalf("moved %.3f of the clusters, want about 1/6", frac)
	}
}

func TestALeavingReplicaGivesUpOnlyItsOwnClusters(t *testing.T) {
	clusters := clusterNames(1000)
	before := replicaIDs(5)
	left := before[2]
	after := append(append([]string{}, before[:2]...), before[3:]...)
	moved := 0
	for _, c := range clusters {
		was, now := Place(c, before), Place(c, after)
		if was != now {
			moved++
			if was != left {
				t.Fatalf("%s moved from %s, which did not leave", c, was)
			}
		}
		if was == left && now == left {
			t.Fatalf("%s still on the replica that left", c)
		}
	}
	frac := float64(moved) / float64(len(clusters))
	t.Logf("leave 5 -> 4: %d of %d clusters moved (%.3f, ideal %.3f)", moved, len(clusters), frac, 1.0/5)
	if frac < 0.14 || frac > 0.26 {
		t.Fatalf("moved %.3f of the clusters, want about 1/5", frac)
	}
}

func TestClusterNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"c1", true}, {"kafka-prod.eu-west-1", true}, {"ns/cluster:9092", true}, {"A_b", true},
		{"", false}, {"-c", false}, {"c 1", false}, {"c\x001", false}, {"é", false},
		{strings.Repeat("a", MaxClusterBytes), true}, {strings.Repeat("a", MaxClusterBytes+1), false},
	} {
		err := ValidateCluster(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateCluster(%q) = %v, want ok %v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateCluster(%q) = %v, not ErrInvalid", tc.name, err)
		}
	}
}

func TestConfigClustersList(t *testing.T) {
	got, err := ParseConfig("studio.yaml", []byte("clusters: [c1, c2]\njobs: []\n"), 0)
	if err != nil || strings.Join(got, ",") != "c1,c2" {
		t.Fatalf("got %q, %v", got, err)
	}
	if got, err := ParseConfig("studio.yaml", []byte("jobs: []\n"), 0); err != nil || got != nil {
		t.Fatalf("no clusters: got %q, %v", got, err)
	}
	for _, tc := range []struct{ doc, want string }{
		{"clusters: c1\n", "studio.yaml:1: clusters: must be a list of cluster names"},
		{"clusters:\n  - c1\n  - c1\n", `studio.yaml:3: clusters: "c1" is listed twice (first on line 2)`},
		{"clusters:\n  - ''\n", "studio.yaml:2: clusters: invalid cluster name: cluster name is empty"},
		{"clusters:\n  - {a: 1}\n", "studio.yaml:2: clusters: each entry must be a cluster name"},
	} {
		_, err := ParseConfig("studio.yaml", []byte(tc.doc), 0)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q: got %v, want %s", tc.doc, err, tc.want)
		}
	}
}

// A list holding the word owned is the job key's value put on the
// top-level list by mistake: refused, not taken as a cluster named owned
// (issue 21). So is clusters: owned at the top level.
func TestTheWordOwnedIsNotAClusterOfTheList(t *testing.T) {
	for _, doc := range []string{"clusters: [owned]\n", "clusters:\n  - c1\n  - owned\n", "clusters: owned\n"} {
		_, err := ParseConfig("studio.yaml", []byte(doc), 0)
		if err == nil || !strings.Contains(err.Error(), "clusters: owned belongs on a job") {
			t.Errorf("%q: got %v; want owned refused", doc, err)
		}
	}
}

// leases.max_config_clusters bounds the list: one more is a config error
// that names leases add and the key; as many passes.
func TestTheConfigListIsBoundedByMaxConfigClusters(t *testing.T) {
	var b strings.Builder
	b.WriteString("clusters:\n")
	for i := range 1001 {
		fmt.Fprintf(&b, "  - c%d\n", i)
	}
	_, err := ParseConfig("studio.yaml", []byte(b.String()), 1000)
	if err == nil || !strings.Contains(err.Error(), "leases add") || !strings.Contains(err.Error(), "leases.max_config_clusters (1000)") ||
		!strings.HasPrefix(err.Error(), "studio.yaml:2: clusters: 1001 clusters listed") {
		t.Fatalf("1,001 clusters under a bound of 1,000: %v", err)
	}
	var cerr *config.Error
	if !errors.As(err, &cerr) {
		t.Errorf("%T is not a config error (exit 2)", err)
	}
	if got, err := ParseConfig("studio.yaml", []byte(b.String()), 1001); err != nil || len(got) != 1001 {
		t.Fatalf("1,001 clusters under a bound of 1,001: %d, %v", len(got), err)
	}
}
