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
	cmd.AddCommand(a.newLocksListCmd(), a.newLocksShowCmd(), a.newLocksReleaseCmd())
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

func (a *app) locksAdmin(ctx context.Context) (*locks.Admin, error) {
	pool, err := a.db(ctx)
	if err != nil {
		return nil, err
	}
	adm, err := locks.NewAdmin(pool, a.lockTable())
	if err != nil {
		return nil, &usageError{err: err}
	}
	if err := adm.CheckSchema(ctx); err != nil {
		return nil, err
	}
	return adm, nil
}

func (a *app) newLocksListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List every lock with its state and holder",
		Example: `  studioctl locks list
  studioctl locks list -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			adm, err := a.locksAdmin(cmd.Context())
			if err != nil {
				return err
			}
			infos, err := adm.List(cmd.Context())
			if err != nil {
				return err
			}
			return printLocks(a.printer(), infos)
		},
	}
}

func (a *app) newLocksShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Show one lock",
		Example: `  studioctl locks show nightly-report
  studioctl locks show nightly-report -o yaml`,
		Args: exactArgs("name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := locks.ValidateName(args[0]); err != nil {
				return err
			}
			adm, err := a.locksAdmin(cmd.Context())
			if err != nil {
				return err
			}
			in, err := adm.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printLocks(a.printer(), []locks.Info{in})
		},
	}
}

type locksReleaseOptions struct {
	force  bool
	reason string
	yes    bool
}

func (a *app) newLocksReleaseCmd() *cobra.Command {
	var o locksReleaseOptions
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
does not ask.`,
		Example: `  studioctl locks release nightly-report --reason "replica crashed"
  studioctl locks release nightly-report --force --yes --reason "java host hung"`,
		Args: exactArgs("name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := locks.ValidateName(args[0]); err != nil {
				return err
			}
			return a.releaseLock(cmd.Context(), args[0], o)
		},
	}
	cmd.Flags().BoolVar(&o.force, "force", false, "release even a lock whose holder is live or unknown")
	cmd.Flags().StringVar(&o.reason, "reason", "", "why, for the audit log")
	cmd.Flags().BoolVar(&o.yes, "yes", false, "do not ask for confirmation")
	return cmd
}

func (a *app) releaseLock(ctx context.Context, name string, o locksReleaseOptions) error {
	adm, err := a.locksAdmin(ctx)
	if err != nil {
		return err
	}
	in, err := adm.Get(ctx, name)
	if err != nil {
		return err
	}
	if err := locks.CheckRelease(in, o.force); err != nil {
		return err
	}
	p := a.printer()
	if in.State == locks.StateFree {
		fmt.Fprintf(a.stderr, "lock %q is already free; nothing changed\n", name)
		if p.Structured() {
			return printLocks(p, []locks.Info{in})
		}
		return nil
	}
	ok, err := a.confirm(fmt.Sprintf("release lock %q held by %s (%s) until %s?", name, in.LockedBy, in.HolderState, in.LockUntil.Format(time.RFC3339)), o.yes)
	if err != nil {
		return err
	}
	if !ok {
		fmt.Fprintln(a.stderr, "not released")
		return nil
	}
	pool, err := a.db(ctx)
	if err != nil {
		return err
	}
	res, err := adm.Release(ctx, pool, locks.ReleaseRequest{Info: in, Force: o.force, Actor: a.actor(), Reason: o.reason})
	if err != nil {
		return err
	}
	if res.FreedSince {
		// Another operator's release (or the holder's unlock, or expiry)
		// came first: the lock is free, as asked, and this call changed
		// nothing and wrote no audit row.
		fmt.Fprintf(a.stderr, "lock %q was released or expired since it was read; it is free, nothing changed\n", name)
		if p.Structured() {
			after, err := adm.Get(ctx, name)
			if err != nil {
				return err
			}
			return printLocks(p, []locks.Info{after})
		}
		return nil
	}
	if !res.Audited {
		fmt.Fprintln(a.stderr, "warning: table studio_audit does not exist (run `studioctl migrate up`): this release is not audited")
	}
	if p.Structured() {
		after, err := adm.Get(ctx, name)
		if err != nil {
			return err
		}
		return printLocks(p, []locks.Info{after})
	}
	fmt.Fprintf(a.stdout, "released lock %q: was %s by %s (%s) until %s; lock_until is now %s\n",
		name, in.State, in.LockedBy, in.HolderState, in.LockUntil.Format(time.RFC3339Nano), res.Until.Format(time.RFC3339Nano))
	return nil
}
