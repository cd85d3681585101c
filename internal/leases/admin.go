package leases

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"gopkg.in/yaml.v3"

	"github.com/studioctl/studioctl/internal/audit"
	"github.com/studioctl/studioctl/internal/bus"
	"github.com/studioctl/studioctl/internal/config"
	"github.com/studioctl/studioctl/internal/liveness"
	"github.com/studioctl/studioctl/internal/natsort"
)

// State of a lease, as leases list shows it.
type State string

const (
	StateOK      State = "ok"      // owned, renewed within the TTL, by the replica placement picks
	StateExpired State = "expired" // owned, but not renewed within the TTL: claimable
	StateUnowned State = "unowned" // no owner
	StateMoving  State = "moving"  // owned and fresh, but placement picks another replica (or none)
)

// OwnerState of a lease's owner, as holder_state is in locks list.
type OwnerState string

const (
	OwnerLive OwnerState = "live" // a replica with a recent heartbeat that is not stopped
	OwnerGone OwnerState = "gone" // not live, or not a known replica
	OwnerNone OwnerState = "none" // no owner
)

var (
	// ErrNotFound: no such cluster (exit 4).
	ErrNotFound = errors.New("no such cluster")
	// ErrRefused: the change would need --force (exit 3).
	ErrRefused = errors.New("refused")
	// ErrChanged: the lease changed hands between read and release; a
	// refusal, read it again.
	ErrChanged = fmt.Errorf("%w: lease changed since it was read", ErrRefused)
)

// DB is what the operator functions need: a pool.
type DB interface {
	Querier
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Info is one row of cluster_lease, judged against database time and the
// live, ready replicas.
type Info struct {
	Cluster    string
	Owner      string // "" when none
	OwnerState OwnerState
	AcquiredAt *time.Time // UTC; nil when unowned
	RenewedAt  *time.Time
	RenewedAge *time.Duration // now() - renewed_at
	Generation int64
	Placement  string // whom rendezvous picks now; "" when no replica is live and ready
	State      State
}

var liveReadySQL = `SELECT ARRAY(SELECT r.id FROM studio_replica r WHERE ` + liveness.LiveSQL("r") + ` AND r.state = 'ready' ORDER BY r.id)`

var listSQL = `SELECT l.cluster, coalesce(l.owner, ''), l.acquired_at, l.renewed_at,
  EXTRACT(EPOCH FROM (now() - l.renewed_at))::float8, l.generation,
  coalesce(l.renewed_at < now() - make_interval(secs => ` + fmt.Sprint(int(LeaseTTL/time.Second)) + `), false),
  ` + liveness.LiveSQL("o") + `
FROM cluster_lease l LEFT JOIN studio_replica o ON o.id = l.owner`

// LiveReady returns the live, ready replicas: the set placement runs over.
func LiveReady(ctx context.Context, q Querier) ([]string, error) {
	var ids []string
	if err := q.QueryRow(ctx, liveReadySQL).Scan(&ids); err != nil {
		return nil, fmt.Errorf("read live replicas: %w", err)
	}
	return ids, nil
}

func query(ctx context.Context, q Querier, where string, args ...any) ([]Info, error) {
	live, err := LiveReady(ctx, q)
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, listSQL+where, args...)
	if err != nil {
		return nil, fmt.Errorf("read leases: %w", err)
	}
	defer rows.Close()
	var out []Info
	for rows.Next() {
		var in Info
		var age *float64
		var expired, ownerLive bool
		if err := rows.Scan(&in.Cluster, &in.Owner, &in.AcquiredAt, &in.RenewedAt, &age, &in.Generation, &expired, &ownerLive); err != nil {
			return nil, fmt.Errorf("read leases: %w", err)
		}
		utc(in.AcquiredAt)
		utc(in.RenewedAt)
		if age != nil && in.Owner != "" {
			d := time.Duration(*age * float64(time.Second)).Round(time.Millisecond)
			in.RenewedAge = &d
		}
		in.Placement = Place(in.Cluster, live)
		in.OwnerState, in.State = judge(in.Owner, ownerLive, expired, in.Placement)
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read leases: %w", err)
	}
	// By cluster in natural order (c2 before c10), which ORDER BY cannot
	// give.
	slices.SortFunc(out, func(a, b Info) int { return natsort.Compare(a.Cluster, b.Cluster) })
	return out, nil
}

func utc(t *time.Time) {
	if t != nil {
		*t = t.UTC()
	}
}

func judge(owner string, live, expired bool, placement string) (OwnerState, State) {
	switch {
	case owner == "":
		return OwnerNone, StateUnowned
	case !live:
		if expired {
			return OwnerGone, StateExpired
		}
		return OwnerGone, StateMoving // its owner is gone: another replica is placed
	case expired:
		return OwnerLive, StateExpired
	case owner != placement:
		return OwnerLive, StateMoving
	default:
		return OwnerLive, StateOK
	}
}

// List returns every lease, by cluster.
func List(ctx context.Context, q Querier) ([]Info, error) { return query(ctx, q, "") }

// Get returns one lease, or ErrNotFound.
func Get(ctx context.Context, q Querier, cluster string) (Info, error) {
	if err := ValidateCluster(cluster); err != nil {
		return Info{}, err
	}
	rows, err := query(ctx, q, " WHERE l.cluster = $1", cluster)
	if err != nil {
		return Info{}, err
	}
	if len(rows) == 0 {
		return Info{}, fmt.Errorf("cluster %q: %w", cluster, ErrNotFound)
	}
	return rows[0], nil
}

// validateAll checks every name and drops repeats, keeping the order.
func validateAll(clusters []string) ([]string, error) {
	if len(clusters) == 0 {
		return nil, fmt.Errorf("%w: no cluster given", ErrInvalid)
	}
	var out []string
	for _, c := range clusters {
		if err := ValidateCluster(c); err != nil {
			return nil, err
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out, nil
}

func rebalance(ctx context.Context, q bus.Execer, key string) error {
	return bus.Notify(ctx, q, bus.Signal(bus.KindLeasesRebalance, key))
}

const insertSQL = `INSERT INTO cluster_lease (cluster) SELECT unnest($1::text[]) ON CONFLICT (cluster) DO NOTHING RETURNING cluster`

// EnsureClusters inserts the clusters of the configuration's clusters:
// list that are absent (one statement) and signals when it added any. It
// returns those it added. It never removes one.
func EnsureClusters(ctx context.Context, q Querier, clusters []string) ([]string, error) {
	if len(clusters) == 0 {
		return nil, nil
	}
	list, err := validateAll(clusters)
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, insertSQL, list)
	if err != nil {
		return nil, fmt.Errorf("insert clusters: %w", err)
	}
	added, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("insert clusters: %w", err)
	}
	if len(added) > 0 {
		if err := rebalance(ctx, q, ""); err != nil {
			return added, err
		}
	}
	natsort.Strings(added)
	return added, nil
}

// Change is who asks for an operator change, and why.
type Change struct {
	Actor  string
	Reason string
}

// Add inserts clusters that are absent, with one audit row each and a
// leases.rebalance signal, in one transaction. It returns those it added
// and those that were there already.
func Add(ctx context.Context, db DB, ch Change, clusters ...string) (added, existing []string, err error) {
	list, err := validateAll(clusters)
	if err != nil {
		return nil, nil, err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("add clusters: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	rows, err := tx.Query(ctx, insertSQL, list)
	if err != nil {
		return nil, nil, fmt.Errorf("add clusters: %w", err)
	}
	added, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, nil, fmt.Errorf("add clusters: %w", err)
	}
	for _, c := range list {
		if !slices.Contains(added, c) {
			existing = append(existing, c)
		}
	}
	for _, c := range added {
		if err := audit.Write(ctx, tx, audit.Entry{Actor: ch.Actor, Action: "leases.add", Target: c, Reason: ch.Reason}); err != nil {
			return nil, nil, err
		}
	}
	if len(added) > 0 {
		if err := rebalance(ctx, tx, ""); err != nil {
			return nil, nil, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, nil, fmt.Errorf("add clusters: commit: %w", err)
	}
	return added, existing, nil
}

// Remove deletes clusters, with one audit row each and a leases.rebalance
// signal, in one transaction: the owner's next round (at once, on the
// signal) finds the lease gone and cancels its duty. An unknown cluster
// among them changes nothing and is ErrNotFound. It returns the rows as
// they were.
func Remove(ctx context.Context, db DB, ch Change, clusters ...string) ([]Info, error) {
	list, err := validateAll(clusters)
	if err != nil {
		return nil, err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("remove clusters: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	before, err := query(ctx, tx, " WHERE l.cluster = ANY($1)", list)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, c := range list {
		if !slices.ContainsFunc(before, func(in Info) bool { return in.Cluster == c }) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("remove clusters: %w: %q; nothing removed", ErrNotFound, missing)
	}
	rows, err := tx.Query(ctx, `DELETE FROM cluster_lease WHERE cluster IN (SELECT cluster FROM cluster_lease WHERE cluster = ANY($1) ORDER BY cluster FOR UPDATE) RETURNING cluster`, list)
	if err != nil {
		return nil, fmt.Errorf("remove clusters: %w", err)
	}
	deleted, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("remove clusters: %w", err)
	}
	var out []Info
	for _, in := range before {
		if !slices.Contains(deleted, in.Cluster) {
			continue // removed meanwhile by another operator
		}
		out = append(out, in)
		err := audit.Write(ctx, tx, audit.Entry{Actor: ch.Actor, Action: "leases.remove", Target: in.Cluster, Reason: ch.Reason,
			Detail: map[string]any{"owner": in.Owner, "owner_state": in.OwnerState, "state": in.State, "generation": in.Generation}})
		if err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("remove clusters: %w: %q were removed meanwhile; nothing removed", ErrNotFound, list)
	}
	if err := rebalance(ctx, tx, ""); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("remove clusters: commit: %w", err)
	}
	return out, nil
}

// CheckRelease says whether in may be released: a lease whose owner is
// live and renewing (state ok or moving) needs force. An unowned lease
// needs nothing; an expired one, or one whose owner is gone, is released
// without force (its owner's duties have stopped, by the trust window).
func CheckRelease(in Info, force bool) error {
	if force || in.Owner == "" || in.OwnerState != OwnerLive || in.State == StateExpired {
		return nil
	}
	return fmt.Errorf("%w: cluster %q is owned by live replica %q (renewed %s ago); use --force to release it anyway",
		ErrRefused, in.Cluster, in.Owner, in.RenewedAge.Round(time.Second))
}

// ReleaseRequest is a release decided on the values of Info.
type ReleaseRequest struct {
	Info  Info // as read just before
	Force bool
	Change
}

// ReleaseResult says what Release changed.
type ReleaseResult struct {
	Changed    bool  // the lease went from Info.Owner to no owner
	Generation int64 // after, when Changed
	// FreedSince: it was owned when read, and had no owner when the
	// release came (another operator, or a drain, released it). Nothing
	// changed.
	FreedSince bool
}

// Release takes the lease read as req.Info from its owner: a
// compare-and-set on owner and generation, so a lease that changed hands
// since it was read is not touched (ErrChanged), and of two concurrent
// releases exactly one changes it. The audit row and the leases.rebalance
// signal go in the same transaction. The placement replica claims it at
// once on the signal; if that is the owner itself, its duties restart.
func Release(ctx context.Context, db DB, req ReleaseRequest) (ReleaseResult, error) {
	in := req.Info
	var res ReleaseResult
	if err := ValidateCluster(in.Cluster); err != nil {
		return res, err
	}
	if err := CheckRelease(in, req.Force); err != nil {
		return res, err
	}
	if in.Owner == "" {
		return res, nil
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("release cluster %q: %w", in.Cluster, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	err = tx.QueryRow(ctx, `UPDATE cluster_lease SET owner = NULL, acquired_at = NULL, renewed_at = NULL, generation = generation + 1
WHERE cluster = $1 AND owner = $2 AND generation = $3 RETURNING generation`, in.Cluster, in.Owner, in.Generation).Scan(&res.Generation)
	if errors.Is(err, pgx.ErrNoRows) {
		return explainNoChange(ctx, tx, in)
	}
	if err != nil {
		return res, fmt.Errorf("release cluster %q: %w", in.Cluster, err)
	}
	res.Changed = true
	err = audit.Write(ctx, tx, audit.Entry{Actor: req.Actor, Action: "leases.release", Target: in.Cluster, Reason: req.Reason,
		Detail: map[string]any{"owner": in.Owner, "owner_state": in.OwnerState, "state": in.State,
			"generation_before": in.Generation, "generation_after": res.Generation, "force": req.Force}})
	if err != nil {
		return res, err
	}
	if err := rebalance(ctx, tx, in.Cluster); err != nil {
		return res, err
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("release cluster %q: commit: %w", in.Cluster, err)
	}
	return res, nil
}

func explainNoChange(ctx context.Context, tx pgx.Tx, in Info) (ReleaseResult, error) {
	var owner *string
	var gen int64
	err := tx.QueryRow(ctx, `SELECT owner, generation FROM cluster_lease WHERE cluster = $1`, in.Cluster).Scan(&owner, &gen)
	if errors.Is(err, pgx.ErrNoRows) {
		return ReleaseResult{}, fmt.Errorf("release cluster %q: %w: it was removed since it was read; nothing changed", in.Cluster, ErrNotFound)
	}
	if err != nil {
		return ReleaseResult{}, fmt.Errorf("release cluster %q: %w", in.Cluster, err)
	}
	if owner == nil {
		return ReleaseResult{FreedSince: true}, nil
	}
	return ReleaseResult{}, fmt.Errorf("release cluster %q: %w: read owned by %s at generation %d, now owned by %s at generation %d; nothing changed, read it again",
		in.Cluster, ErrChanged, in.Owner, in.Generation, *owner, gen)
}

// ParseConfig reads the top-level clusters: list of YAML document b (named
// file in errors). The binary parses the config file once (config.Load)
// and hands its clusters: section to ParseSection; ParseConfig is for a
// document on its own.
func ParseConfig(file string, b []byte, maxClusters int) ([]string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		if line, msg, ok := config.SyntaxLine(b, err); ok {
			return nil, &config.Error{Msg: fmt.Sprintf("%s:%d: clusters: yaml syntax error: %s", file, line, msg)}
		}
		return nil, &config.Error{Msg: fmt.Sprintf("%s: clusters: %v", file, err)}
	}
	return ParseSection(file, config.NewDocument(file, &doc).Section("clusters"), maxClusters)
}

// ParseSection reads list, the value of a config file's top-level
// clusters: key (nil: none), as parsed once by config.Load
// (Config.Doc.Section("clusters")): a list of at most maxClusters cluster
// names (0: no bound), each valid and listed once. The word owned is
// refused: it belongs on a job (clusters: owned), and a list holding it is
// that mistake, not a cluster named owned. Every error names file and the
// node's line.
//
// The list is bounded because every name in it is inserted into the
// shared cluster_lease table at start and stays there until leases
// remove: a list of 20,000 left 20,000 leases whose duties overloaded
// every replica (issue 21). More clusters are added deliberately, with
// leases add.
func ParseSection(file string, list *yaml.Node, maxClusters int) ([]string, error) {
	if list == nil || list.Tag == "!!null" {
		return nil, nil
	}
	bad := func(n *yaml.Node, format string, args ...any) error {
		return &config.Error{Msg: fmt.Sprintf("%s:%d: clusters: %s", file, n.Line, fmt.Sprintf(format, args...))}
	}
	if list.Kind == yaml.ScalarNode && list.Value == "owned" {
		return nil, bad(list, "owned belongs on a job (clusters: owned runs it once per owned cluster); the top-level clusters: is a list of cluster names")
	}
	if list.Kind != yaml.SequenceNode {
		return nil, bad(list, "must be a list of cluster names")
	}
	if maxClusters > 0 && len(list.Content) > maxClusters {
		return nil, bad(list, "%d clusters listed, more than leases.max_config_clusters (%d): every one is added to the shared cluster_lease table at start and stays there; add that many with studioctl leases add, or raise leases.max_config_clusters",
			len(list.Content), maxClusters)
	}
	var out []string
	seen := map[string]int{}
	for _, n := range list.Content {
		if n.Kind != yaml.ScalarNode {
			return nil, bad(n, "each entry must be a cluster name")
		}
		if n.Value == "owned" {
			return nil, bad(n, "owned is not a cluster name here: clusters: owned belongs on a job (it runs the job once per owned cluster); this list names clusters (a cluster called owned is added with leases add)")
		}
		if err := ValidateCluster(n.Value); err != nil {
			return nil, bad(n, "%v", err)
		}
		if prev, dup := seen[n.Value]; dup {
			return nil, bad(n, "%q is listed twice (first on line %d)", n.Value, prev)
		}
		seen[n.Value] = n.Line
		out = append(out, n.Value)
	}
	return out, nil
}

// CountByOwner returns how many leases each replica owns (for the leases
// column of replicas list); replicas that own none are absent.
func CountByOwner(ctx context.Context, q Querier) (map[string]int, error) {
	rows, err := q.Query(ctx, `SELECT owner, count(*)::int FROM cluster_lease WHERE owner IS NOT NULL GROUP BY owner`)
	if err != nil {
		return nil, fmt.Errorf("count leases: %w", err)
	}
	out := map[string]int{}
	for rows.Next() {
		var o string
		var n int
		if err := rows.Scan(&o, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("count leases: %w", err)
		}
		out[o] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count leases: %w", err)
	}
	return out, nil
}
