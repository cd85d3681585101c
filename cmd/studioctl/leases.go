package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/config"
	"github.com/studioctl/studioctl/internal/leases"
	"github.com/studioctl/studioctl/internal/output"
)

func (a *app) newLeasesCmd() *cobra.Command {
	cmd := groupCmd("leases", "See, add, remove and release cluster leases", `Every cluster in cluster_lease and the replica that owns it. Each cluster's
duties run only on its owner; placement is rendezvous hashing over the live,
ready replicas (docs/leases.md). Owners renew every 5 s; a lease not renewed
for 15 s (database time) may be claimed by another replica.

State: ok (owned and renewed by the replica placement picks), moving (owned
and renewed, but placement picks another replica, or none), expired (not
renewed for 15 s: claimable), unowned. Owner state: live (a replica with a
heartbeat in the last 15 s that is not stopped), gone (not live, or not a
known replica), none.`)
	cmd.AddCommand(newLeasesListCmd(a, nil), newLeasesAddCmd(a, nil), newLeasesRemoveCmd(a, nil), newLeasesReleaseCmd(a, nil))
	return cmd
}

// leaseJSON is the stable JSON/YAML shape of a lease.
type leaseJSON struct {
	Cluster           string     `json:"cluster" yaml:"cluster"`
	Owner             *string    `json:"owner" yaml:"owner"`
	OwnerState        string     `json:"owner_state" yaml:"owner_state"`
	AcquiredAt        *time.Time `json:"acquired_at" yaml:"acquired_at"`
	RenewedAt         *time.Time `json:"renewed_at" yaml:"renewed_at"`
	RenewedAgeSeconds *float64   `json:"renewed_age_seconds" yaml:"renewed_age_seconds"`
	Generation        int64      `json:"generation" yaml:"generation"`
	Placement         *string    `json:"placement" yaml:"placement"`
	State             string     `json:"state" yaml:"state"`
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func toLeaseJSON(in leases.Info) leaseJSON {
	out := leaseJSON{
		Cluster: in.Cluster, Owner: optional(in.Owner), OwnerState: string(in.OwnerState),
		AcquiredAt: in.AcquiredAt, RenewedAt: in.RenewedAt, Generation: in.Generation,
		Placement: optional(in.Placement), State: string(in.State),
	}
	if in.RenewedAge != nil {
		s := in.RenewedAge.Seconds()
		out.RenewedAgeSeconds = &s
	}
	return out
}

var leaseColumns = []output.Column{
	{Header: "CLUSTER"}, {Header: "STATE"}, {Header: "OWNER"}, {Header: "OWNER STATE"},
	{Header: "RENEWED"}, {Header: "GENERATION"}, {Header: "PLACEMENT"}, {Header: "ACQUIRED", Wide: true},
}

func leaseStateTone(s leases.State) output.Tone {
	switch s {
	case leases.StateOK:
		return output.Good
	case leases.StateMoving:
		return output.Warn
	default:
		return output.Bad
	}
}

func ownerTone(s leases.OwnerState) output.Tone {
	switch s {
	case leases.OwnerLive:
		return output.Good
	case leases.OwnerGone:
		return output.Bad
	default:
		return output.Dim
	}
}

// printLeases prints leases; JSON and YAML are always an array.
func printLeases(p *output.Printer, infos []leases.Info) error {
	data := make([]leaseJSON, 0, len(infos))
	rows := make([][]output.Cell, 0, len(infos))
	for _, in := range infos {
		data = append(data, toLeaseJSON(in))
		renewed := p.TimePtr(in.RenewedAt)
		if p.Terminal() && in.RenewedAge != nil {
			renewed = output.Duration(*in.RenewedAge) + " ago"
		}
		rows = append(rows, []output.Cell{
			{Text: in.Cluster}, {Text: string(in.State), Tone: leaseStateTone(in.State)}, {Text: in.Owner},
			{Text: string(in.OwnerState), Tone: ownerTone(in.OwnerState)}, {Text: renewed},
			{Text: strconv.FormatInt(in.Generation, 10)}, {Text: in.Placement}, {Text: p.TimePtr(in.AcquiredAt)},
		})
	}
	return p.Print(data, leaseColumns, rows)
}

// displayedLeases returns the leases as shown: with a fixed display clock
// (STUDIO_NOW), the renewal age is counted from it, so output is stable.
// The state stays the database's judgement.
func displayedLeases(d deps, infos []leases.Info) []leases.Info {
	if !d.NowFixed {
		return infos
	}
	now := d.Now()
	for i := range infos {
		if infos[i].RenewedAt != nil {
			age := max(now.Sub(*infos[i].RenewedAt), 0) // a renewal after the display clock shows as just now
			infos[i].RenewedAge = &age
		}
	}
	return infos
}

// clusterArgs checks CLUSTER... arguments: at least one, each a valid name.
func clusterArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return usageErrorf("%s: missing argument CLUSTER (usage: %s)", cmd.CommandPath(), cmd.UseLine())
	}
	for _, c := range args {
		if err := leases.ValidateCluster(c); err != nil {
			return &usageError{err: fmt.Errorf("%s: %w", cmd.CommandPath(), err)}
		}
	}
	return nil
}

// --- leases list

// leasesListOptions are the flags and dependencies of leases list.
type leasesListOptions struct {
	deps
	watchFlags
}

func newLeasesListCmd(a *app, runF func(context.Context, *leasesListOptions) error) *cobra.Command {
	o := &leasesListOptions{deps: a.deps()}
	cmd := &cobra.Command{
		Use:   "list [--watch]",
		Short: "List every cluster with its owner, placement and state",
		Example: `  studioctl leases list
  studioctl leases list --watch
  studioctl leases list -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return leasesListRun(cmd.Context(), o)
		},
	}
	o.watchFlags.add(cmd)
	return withFormats(cmd, output.Table, output.Wide, output.JSON, output.YAML)
}

// leasesListRun prints every lease, once or, with --watch, on every change.
func leasesListRun(ctx context.Context, o *leasesListOptions) error {
	pool, err := o.DB(ctx)
	if err != nil {
		return err
	}
	return watchList(ctx, o.deps, o.watchFlags, "leases", func(ctx context.Context) (listView, error) {
		infos, err := leases.List(ctx, pool)
		if err != nil {
			return listView{}, err
		}
		return listView{
			print: func(p *output.Printer) error { return printLeases(p, displayedLeases(o.deps, infos)) },
			key:   leasesKey(infos),
		}, nil
	})
}

// leasesKey is what leases list shows minus what moves with every renewal
// (its time and age). A lease turning expired is a change of its state.
func leasesKey(infos []leases.Info) any {
	key := make([]leases.Info, 0, len(infos))
	for _, in := range infos {
		in.RenewedAt, in.RenewedAge = nil, nil
		key = append(key, in)
	}
	return key
}

// --- leases add

// leasesAddOptions are the flags, arguments and dependencies of leases add.
type leasesAddOptions struct {
	deps
	Clusters []string
	Reason   string
	Yes      bool
}

func newLeasesAddCmd(a *app, runF func(context.Context, *leasesAddOptions) error) *cobra.Command {
	o := &leasesAddOptions{deps: a.deps()}
	cmd := &cobra.Command{
		Use:   "add CLUSTER... [--reason R] [--yes]",
		Short: "Add clusters (audited); replicas claim them at once",
		Long: `Insert clusters into cluster_lease, one studio_audit row each, and signal
leases.rebalance so the replica placement picks claims each at once. A
cluster that exists already is left as it is (exit 0). A cluster name is 1
to 128 bytes of letters, digits and . _ : / -, starting with a letter or
digit. On a terminal it asks for confirmation unless --yes.`,
		Example: `  studioctl leases add kafka-eu-1 kafka-eu-2
  studioctl leases add kafka-us-1 --reason "new region" --yes`,
		Args: clusterArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Clusters = args
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return leasesAddRun(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.Reason, "reason", "", "why, for the audit log")
	cmd.Flags().BoolVar(&o.Yes, "yes", false, "do not ask for confirmation")
	return withFormats(cmd, output.Table, output.JSON, output.YAML)
}

// leasesAddRun inserts the clusters that are absent.
func leasesAddRun(ctx context.Context, o *leasesAddOptions) error {
	pool, err := o.DB(ctx)
	if err != nil {
		return err
	}
	ok, err := o.IO.confirm(fmt.Sprintf("add %s %s?", plural(len(o.Clusters), "cluster", "clusters"), strings.Join(o.Clusters, ", ")), o.Yes)
	if err != nil {
		return err
	}
	if !ok {
		fmt.Fprintln(o.IO.Err, "not added")
		return nil
	}
	added, existing, err := leases.Add(ctx, pool, leases.Change{Actor: o.Actor(), Reason: o.Reason}, o.Clusters...)
	if err != nil {
		return err
	}
	for _, c := range existing {
		fmt.Fprintf(o.IO.Err, "cluster %q exists already; nothing changed\n", c)
	}
	p := o.Printer()
	if p.Structured() {
		return printSome(ctx, o.deps, pool, p, added)
	}
	for _, c := range added {
		fmt.Fprintf(o.IO.Out, "added cluster %q\n", c)
	}
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// printSome prints the current rows of clusters, in the order of the list.
func printSome(ctx context.Context, d deps, q leases.Querier, p *output.Printer, clusters []string) error {
	infos, err := leases.List(ctx, q)
	if err != nil {
		return err
	}
	infos = slices.DeleteFunc(infos, func(in leases.Info) bool { return !slices.Contains(clusters, in.Cluster) })
	return printLeases(p, displayedLeases(d, infos))
}

// --- leases remove

// leasesRemoveOptions are the flags, arguments and dependencies of leases remove.
type leasesRemoveOptions struct {
	deps
	// ConfigFile is the configuration file read, if any, as read once:
	// remove warns about a cluster it lists.
	ConfigFile func() *config.Document
	Clusters   []string
	Reason     string
	Yes        bool
}

func newLeasesRemoveCmd(a *app, runF func(context.Context, *leasesRemoveOptions) error) *cobra.Command {
	o := &leasesRemoveOptions{deps: a.deps(), ConfigFile: func() *config.Document { return a.cfg.Doc }}
	cmd := &cobra.Command{
		Use:   "remove CLUSTER... [--reason R] [--yes]",
		Short: "Remove clusters (audited); their duties stop at once",
		Long: `Delete clusters from cluster_lease, one studio_audit row each, in one
transaction with a leases.rebalance signal: the owner's next round, at once
on the signal, finds the lease gone and cancels the cluster's duties. It
needs no --force, even for a cluster a live replica owns. If one of the
clusters does not exist, nothing is removed (exit 4).

A cluster listed under clusters: in a replica's configuration is added
again when that replica starts: remove it there too. On a terminal it asks
for confirmation unless --yes.`,
		Example: `  studioctl leases remove kafka-eu-2 --reason "decommissioned"
  studioctl leases remove kafka-eu-1 kafka-eu-2 --yes`,
		Args: clusterArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Clusters = args
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return leasesRemoveRun(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.Reason, "reason", "", "why, for the audit log")
	cmd.Flags().BoolVar(&o.Yes, "yes", false, "do not ask for confirmation")
	return withFormats(cmd, output.Table, output.JSON, output.YAML)
}

// leasesRemoveRun deletes the clusters, all of them or none.
func leasesRemoveRun(ctx context.Context, o *leasesRemoveOptions) error {
	pool, err := o.DB(ctx)
	if err != nil {
		return err
	}
	var what []string
	for _, c := range o.Clusters {
		in, err := leases.Get(ctx, pool, c)
		if err != nil {
			return err
		}
		if in.Owner != "" {
			what = append(what, fmt.Sprintf("%s (owned by %s, %s)", c, in.Owner, in.OwnerState))
		} else {
			what = append(what, c+" (unowned)")
		}
	}
	ok, err := o.IO.confirm(fmt.Sprintf("remove %s %s? Their duties stop at once.", plural(len(o.Clusters), "cluster", "clusters"), strings.Join(what, ", ")), o.Yes)
	if err != nil {
		return err
	}
	if !ok {
		fmt.Fprintln(o.IO.Err, "not removed")
		return nil
	}
	removed, err := leases.Remove(ctx, pool, leases.Change{Actor: o.Actor(), Reason: o.Reason}, o.Clusters...)
	if err != nil {
		return err
	}
	if doc := o.ConfigFile(); doc != nil {
		file := doc.Path
		if listed, err := leases.ParseSection(file, doc.Section("clusters"), 0); err == nil {
			for _, in := range removed {
				if slices.Contains(listed, in.Cluster) {
					fmt.Fprintf(o.IO.Err, "warning: cluster %q is listed under clusters: in %s; a replica that starts with it adds it again\n", in.Cluster, file)
				}
			}
		}
	}
	p := o.Printer()
	if p.Structured() {
		return printLeases(p, displayedLeases(o.deps, removed))
	}
	for _, in := range removed {
		owner := "unowned"
		if in.Owner != "" {
			owner = fmt.Sprintf("owned by %s (%s)", in.Owner, in.OwnerState)
		}
		fmt.Fprintf(o.IO.Out, "removed cluster %q: was %s, generation %d\n", in.Cluster, owner, in.Generation)
	}
	return nil
}

// --- leases release

// leasesReleaseOptions are the flags, argument and dependencies of leases release.
type leasesReleaseOptions struct {
	deps
	Cluster string
	Force   bool
	Reason  string
	Yes     bool
}

func newLeasesReleaseCmd(a *app, runF func(context.Context, *leasesReleaseOptions) error) *cobra.Command {
	o := &leasesReleaseOptions{deps: a.deps()}
	cmd := &cobra.Command{
		Use:   "release CLUSTER [--force] [--reason R] [--yes]",
		Short: "Force a handover: take a lease from its owner (compare-and-set, audited)",
		Long: `Set a lease's owner to none, only if it still has the owner and generation
just read (a compare-and-set in one transaction with its audit row and a
leases.rebalance signal). The replica placement picks then claims it at
once; when that is the owner itself, its duties restart.

A lease whose owner is live and renewing is refused (exit 3) unless --force:
with --force its duties stop on the owner's next round, at once if it hears
the signal, within 10 s (its trust window) otherwise, and may overlap the new
owner's for that long. A lease whose owner is gone, or that has expired,
needs no --force. An unowned lease is left as it is (exit 0). An unknown
cluster exits 4. Of two releases at the same time, one changes the lease;
the other finds it released and exits 0. On a terminal it asks for
confirmation unless --yes.`,
		Example: `  studioctl leases release kafka-eu-1 --reason "owner crashed"
  studioctl leases release kafka-eu-1 --force --yes --reason "duty stuck"`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := exactArgs("cluster")(cmd, args); err != nil {
				return err
			}
			return clusterArgs(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Cluster = args[0]
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return leasesReleaseRun(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVar(&o.Force, "force", false, "release even a lease whose owner is live")
	cmd.Flags().StringVar(&o.Reason, "reason", "", "why, for the audit log")
	cmd.Flags().BoolVar(&o.Yes, "yes", false, "do not ask for confirmation")
	return withFormats(cmd, output.Table, output.JSON, output.YAML)
}

// leasesReleaseRun forces a handover of one lease (compare-and-set, audited).
func leasesReleaseRun(ctx context.Context, o *leasesReleaseOptions) error {
	pool, err := o.DB(ctx)
	if err != nil {
		return err
	}
	in, err := leases.Get(ctx, pool, o.Cluster)
	if err != nil {
		return err
	}
	if err := leases.CheckRelease(in, o.Force); err != nil {
		return err
	}
	p := o.Printer()
	if in.Owner == "" {
		fmt.Fprintf(o.IO.Err, "cluster %q is not owned; nothing changed\n", in.Cluster)
		if p.Structured() {
			return printLeases(p, displayedLeases(o.deps, []leases.Info{in}))
		}
		return nil
	}
	ok, err := o.IO.confirm(fmt.Sprintf("release cluster %q owned by %s (%s, %s) at generation %d?", in.Cluster, in.Owner, in.OwnerState, in.State, in.Generation), o.Yes)
	if err != nil {
		return err
	}
	if !ok {
		fmt.Fprintln(o.IO.Err, "not released")
		return nil
	}
	res, err := leases.Release(ctx, pool, leases.ReleaseRequest{Info: in, Force: o.Force, Change: leases.Change{Actor: o.Actor(), Reason: o.Reason}})
	if err != nil {
		return err
	}
	if res.FreedSince {
		fmt.Fprintf(o.IO.Err, "cluster %q was released since it was read; it has no owner, nothing changed\n", in.Cluster)
	}
	if p.Structured() {
		after, err := leases.Get(ctx, pool, in.Cluster)
		if errors.Is(err, leases.ErrNotFound) {
			return printLeases(p, nil)
		}
		if err != nil {
			return err
		}
		return printLeases(p, displayedLeases(o.deps, []leases.Info{after}))
	}
	if res.Changed {
		next := "no replica is live and ready to claim it"
		if in.Placement != "" {
			next = fmt.Sprintf("%s claims it next", in.Placement)
		}
		fmt.Fprintf(o.IO.Out, "released cluster %q: was owned by %s (%s, %s), generation %d -> %d; %s\n",
			in.Cluster, in.Owner, in.OwnerState, in.State, in.Generation, res.Generation, next)
	}
	return nil
}
