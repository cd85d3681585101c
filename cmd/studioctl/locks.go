package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/locks"
	"github.com/studioctl/studioctl/internal/output"
)

func (a *app) newLocksCmd() *cobra.Command {
	cmd := groupCmd("locks", "See and release ShedLock-compatible locks", `Every row of the lock table (ShedLock's shedlock on PostgreSQL, or the table
set by locks.table and locks.columns.*), judged in database time.

Lock state: held (lock_until ahead), free (lock_until passed), stale (held by
a replica that is gone). Holder state: live (a replica with a heartbeat in the
last 15 s that is not stopped), gone (a known replica that is not live),
unknown (not a replica id, for example a Java host).`)
	cmd.AddCommand(newLocksListCmd(a, nil), newLocksShowCmd(a, nil), newLocksReleaseCmd(a, nil))
	return cmd
}

// lockJSON is the stable JSON/YAML shape of a lock.
type lockJSON struct {
	Name             string    `json:"name" yaml:"name"`
	LockedBy         string    `json:"locked_by" yaml:"locked_by"`
	LockedAt         time.Time `json:"locked_at" yaml:"locked_at"`
	LockUntil        time.Time `json:"lock_until" yaml:"lock_until"`
	State            string    `json:"state" yaml:"state"`
	HolderState      string    `json:"holder_state" yaml:"holder_state"`
	RemainingSeconds float64   `json:"remaining_seconds" yaml:"remaining_seconds"`
}

func toLockJSON(in locks.Info) lockJSON {
	rem := in.Remaining.Seconds()
	if rem < 0 {
		rem = 0
	}
	return lockJSON{
		Name: in.Name, LockedBy: in.LockedBy, LockedAt: in.LockedAt.UTC(), LockUntil: in.LockUntil.UTC(),
		State: string(in.State), HolderState: string(in.HolderState), RemainingSeconds: rem,
	}
}

var lockColumns = []output.Column{
	{Header: "NAME"}, {Header: "STATE"}, {Header: "LOCKED BY"}, {Header: "HOLDER"},
	{Header: "LOCKED AT"}, {Header: "LOCK UNTIL"}, {Header: "REMAINING"},
}

func stateTone(s locks.State) output.Tone {
	switch s {
	case locks.StateHeld:
		return output.Warn
	case locks.StateStale:
		return output.Bad
	default:
		return output.Good
	}
}

func holderTone(h locks.HolderState) output.Tone {
	switch h {
	case locks.HolderLive:
		return output.Good
	case locks.HolderGone:
		return output.Bad
	default:
		return output.Dim
	}
}

// printLocks prints locks; JSON and YAML are always an array, for show and
// release too, so scripts read one shape.
func printLocks(p *output.Printer, infos []locks.Info) error {
	rows := make([][]output.Cell, 0, len(infos))
	data := make([]lockJSON, 0, len(infos))
	for _, in := range infos {
		data = append(data, toLockJSON(in))
		remaining := ""
		if in.Remaining > 0 {
			remaining = output.Duration(in.Remaining)
		}
		rows = append(rows, []output.Cell{
			{Text: in.Name}, {Text: string(in.State), Tone: stateTone(in.State)}, {Text: in.LockedBy},
			{Text: string(in.HolderState), Tone: holderTone(in.HolderState)},
			{Text: p.Time(in.LockedAt)}, {Text: p.Time(in.LockUntil)}, {Text: remaining},
		})
	}
	return p.Print(data, lockColumns, rows)
}

// locksAdmin opens the lock table's admin and checks its schema.
func locksAdmin(ctx context.Context, d deps) (*locks.Admin, error) {
	pool, err := d.DB(ctx)
	if err != nil {
		return nil, err
	}
	adm, err := locks.NewAdmin(pool, d.LockTable())
	if err != nil {
		return nil, &usageError{err: err}
	}
	if err := adm.CheckSchema(ctx); err != nil {
		return nil, err
	}
	return adm, nil
}

// displayed returns the locks as shown: with a fixed display clock
// (STUDIO_NOW), the remaining time is counted from it, so output is stable.
// The state is the database's judgement either way.
func displayed(d deps, infos []locks.Info) []locks.Info {
	if !d.NowFixed {
		return infos
	}
	now := d.Now()
	for i := range infos {
		infos[i].Remaining = 0
		if infos[i].State != locks.StateFree {
			infos[i].Remaining = max(infos[i].LockUntil.Sub(now), 0)
		}
	}
	return infos
}

// locksListOptions are the flags and dependencies of locks list.
type locksListOptions struct {
	deps
	watchFlags
}

func newLocksListCmd(a *app, runF func(context.Context, *locksListOptions) error) *cobra.Command {
	o := &locksListOptions{deps: a.deps()}
	cmd := &cobra.Command{
		Use:   "list [--watch]",
		Short: "List every lock with its state and holder",
		Example: `  studioctl locks list
  studioctl locks list --watch
  studioctl locks list -o json
  studioctl locks list | awk -F'\t' '$2 == "stale" {print $1}'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return locksListRun(cmd.Context(), o)
		},
	}
	o.watchFlags.add(cmd)
	return withFormats(cmd, listFormats...)
}

// locksListRun prints every lock, once or, with --watch, on every change.
func locksListRun(ctx context.Context, o *locksListOptions) error {
	adm, err := locksAdmin(ctx, o.deps)
	if err != nil {
		return err
	}
	return watchList(ctx, o.deps, o.watchFlags, "locks", func(ctx context.Context) (listView, error) {
		infos, err := adm.List(ctx)
		if err != nil {
			return listView{}, err
		}
		return listView{
			print: func(p *output.Printer) error { return printLocks(p, displayed(o.deps, infos)) },
			key:   locksKey(infos),
		}, nil
	})
}

// locksKey is what locks list shows minus what moves on its own: the
// remaining time, and lock_until, which a running job's keep-alive extends
// (a lock's heartbeat). A release, a new holder or a new locked_at changes
// the state, the holder or locked_at.
func locksKey(infos []locks.Info) any {
	key := make([]locks.Info, 0, len(infos))
	for _, in := range infos {
		in.LockUntil, in.Remaining = time.Time{}, 0
		key = append(key, in)
	}
	return key
}

// locksShowOptions are the argument and dependencies of locks show.
type locksShowOptions struct {
	deps
	Name string
}

func newLocksShowCmd(a *app, runF func(context.Context, *locksShowOptions) error) *cobra.Command {
	o := &locksShowOptions{deps: a.deps()}
	return withFormats(&cobra.Command{
		Use:   "show NAME",
		Short: "Show one lock",
		Example: `  studioctl locks show nightly-report
  studioctl locks show nightly-report -o yaml`,
		Args: exactArgs("name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name = args[0]
			if err := locks.ValidateName(o.Name); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return locksShowRun(cmd.Context(), o)
		},
	}, listFormats...)
}

// locksShowRun prints one lock.
func locksShowRun(ctx context.Context, o *locksShowOptions) error {
	adm, err := locksAdmin(ctx, o.deps)
	if err != nil {
		return err
	}
	in, err := adm.Get(ctx, o.Name)
	if err != nil {
		return err
	}
	return printLocks(o.Printer(), displayed(o.deps, []locks.Info{in}))
}

// locksReleaseOptions are the flags, argument and dependencies of locks release.
type locksReleaseOptions struct {
	deps
	Name   string
	Force  bool
	Reason string
	Yes    bool
}

func newLocksReleaseCmd(a *app, runF func(context.Context, *locksReleaseOptions) error) *cobra.Command {
	o := &locksReleaseOptions{deps: a.deps()}
	cmd := &cobra.Command{
		Use:   "release NAME [--force] [--reason R] [--yes]",
		Short: "Release a lock safely (compare-and-set, audited)",
		Long: `Release a lock: set its lock_until to database now, only if it still has
every value just read: holder, locked_at and lock_until (a compare-and-set in
one transaction with its audit row). The row is never deleted: Java ShedLock
caches the names it knows. NAME is a ShedLock lock name of up to 64
characters.

A lock that is held by a live replica, or by an unknown holder such as a Java
process, is refused (exit 3) unless --force. A lock held by a gone replica
(stale) is released without --force. A release that changes the lock writes
one studio_audit row with the actor and --reason.

Exactly once: of two releases of one lock at the same time, one changes it;
the other finds it already free, says so and exits 0 without an audit row. A
lock that changed otherwise since it was read (another holder, a new
locked_at, an extended lock_until) is not touched: exit 3, read it again.
A lock that is already free is left as it is (exit 0).

On a terminal it asks for confirmation unless --yes; without a terminal it
does not ask. -o json or yaml prints the lock as it is afterwards.`,
		Example: `  studioctl locks release nightly-report --reason "replica crashed"
  studioctl locks release nightly-report --force --yes --reason "java host hung"`,
		Args: exactArgs("name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name = args[0]
			if err := locks.ValidateName(o.Name); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return locksReleaseRun(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVar(&o.Force, "force", false, "release even a lock whose holder is live or unknown")
	cmd.Flags().StringVar(&o.Reason, "reason", "", "why, for the audit log")
	cmd.Flags().BoolVar(&o.Yes, "yes", false, "do not ask for confirmation")
	return withFormats(cmd, output.Table, output.JSON, output.YAML)
}

// locksReleaseRun releases one lock (SPEC §4) and says what it changed.
func locksReleaseRun(ctx context.Context, o *locksReleaseOptions) error {
	name := o.Name
	adm, err := locksAdmin(ctx, o.deps)
	if err != nil {
		return err
	}
	in, err := adm.Get(ctx, name)
	if err != nil {
		return err
	}
	if err := locks.CheckRelease(in, o.Force); err != nil {
		return err
	}
	p := o.Printer()
	printAfter := func() error {
		after, err := adm.Get(ctx, name)
		if err != nil {
			return err
		}
		return printLocks(p, displayed(o.deps, []locks.Info{after}))
	}
	if in.State == locks.StateFree {
		fmt.Fprintf(o.IO.Err, "lock %q is already free; nothing changed\n", name)
		if p.Structured() {
			return printLocks(p, displayed(o.deps, []locks.Info{in}))
		}
		return nil
	}
	ok, err := o.IO.confirm(fmt.Sprintf("release lock %q held by %s (%s) until %s?", name, in.LockedBy, in.HolderState, in.LockUntil.Format(time.RFC3339)), o.Yes)
	if err != nil {
		return err
	}
	if !ok {
		fmt.Fprintln(o.IO.Err, "not released")
		return nil
	}
	pool, err := o.DB(ctx)
	if err != nil {
		return err
	}
	res, err := adm.Release(ctx, pool, locks.ReleaseRequest{Info: in, Force: o.Force, Actor: o.Actor(), Reason: o.Reason})
	if err != nil {
		return err
	}
	if res.FreedSince {
		// Another operator's release (or the holder's unlock, or expiry)
		// came first: the lock is free, as asked, and this call changed
		// nothing and wrote no audit row.
		fmt.Fprintf(o.IO.Err, "lock %q was released or expired since it was read; it is free, nothing changed\n", name)
		if p.Structured() {
			return printAfter()
		}
		return nil
	}
	if !res.Audited {
		fmt.Fprintln(o.IO.Err, "warning: table studio_audit does not exist (run `studioctl migrate up`): this release is not audited")
	}
	if p.Structured() {
		return printAfter()
	}
	fmt.Fprintf(o.IO.Out, "released lock %q: was %s by %s (%s) until %s; lock_until is now %s\n",
		name, in.State, in.LockedBy, in.HolderState, in.LockUntil.Format(time.RFC3339Nano), res.Until.Format(time.RFC3339Nano))
	return nil
}
