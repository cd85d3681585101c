package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/leases"
	"github.com/studioctl/studioctl/internal/output"
	"github.com/studioctl/studioctl/internal/replicas"
)

// drainWaitPoll is how often replicas drain --wait looks at the state.
const drainWaitPoll = 500 * time.Millisecond

func (a *app) newReplicasCmd() *cobra.Command {
	cmd := groupCmd("replicas", "Watch, drain and forget replicas", `Every replica (one studioctl run process) in studio_replica. A replica whose
heartbeat is older than 15 s is gone; gone without a recorded stop is a crash.`)
	cmd.AddCommand(newReplicasListCmd(a, nil), newReplicasDrainCmd(a, nil), newReplicasForgetCmd(a, nil))
	return cmd
}

// replicaJSON is the stable JSON/YAML shape of a replica.
type replicaJSON struct {
	ID                  string     `json:"id" yaml:"id"`
	Host                string     `json:"host" yaml:"host"`
	PID                 int        `json:"pid" yaml:"pid"`
	Version             string     `json:"version" yaml:"version"`
	State               string     `json:"state" yaml:"state"`
	StartedAt           time.Time  `json:"started_at" yaml:"started_at"`
	HeartbeatAt         time.Time  `json:"heartbeat_at" yaml:"heartbeat_at"`
	StoppedAt           *time.Time `json:"stopped_at" yaml:"stopped_at"`
	HeartbeatAgeSeconds float64    `json:"heartbeat_age_seconds" yaml:"heartbeat_age_seconds"`
	Gone                bool       `json:"gone" yaml:"gone"`
	Crashed             bool       `json:"crashed" yaml:"crashed"`
	// UptimeSeconds is the table's UPTIME: database now - started_at;
	// null for a stopped or gone replica, whose UPTIME is empty.
	UptimeSeconds *float64 `json:"uptime_seconds" yaml:"uptime_seconds"`
	// RunsInFlight is the table's RUNS: its runs still going
	// (studio_job_run rows without finished_at).
	RunsInFlight       int      `json:"runs_in_flight" yaml:"runs_in_flight"`
	Leases             int      `json:"leases" yaml:"leases"` // cluster leases it owns (cluster_lease)
	ClockOffsetSeconds *float64 `json:"clock_offset_seconds" yaml:"clock_offset_seconds"`
	// HTTPAddr is where it serves its probes, metrics and page, as -o wide
	// shows it; null when it recorded none.
	HTTPAddr *string `json:"http_addr" yaml:"http_addr"`
}

// optionalString is s, or nil (null in JSON and YAML) when s is empty.
func optionalString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

var replicaColumns = []output.Column{
	{Header: "ID"}, {Header: "HOST"}, {Header: "PID", Wide: true}, {Header: "VERSION"}, {Header: "STATE"},
	{Header: "HEARTBEAT"}, {Header: "UPTIME"}, {Header: "RUNS"}, {Header: "LEASES"}, {Header: "HTTP", Wide: true},
}

func replicaState(in replicas.Info) (string, output.Tone) {
	switch {
	case in.Crashed:
		return "crashed", output.Bad
	case in.State == replicas.StateStopped:
		return "stopped", output.Dim
	case in.State == replicas.StateReady:
		return "ready", output.Good
	default:
		return string(in.State), output.Warn
	}
}

// printReplicas prints the replicas; leaseCount is the number of cluster
// leases each owns (leases.CountByOwner).
func printReplicas(p *output.Printer, infos []replicas.Info, leaseCount map[string]int) error {
	data := make([]replicaJSON, 0, len(infos))
	rows := make([][]output.Cell, 0, len(infos))
	for _, in := range infos {
		var uptimeSeconds *float64
		uptime := ""
		if in.State != replicas.StateStopped && !in.Gone {
			u := in.Uptime.Seconds()
			uptimeSeconds = &u
			uptime = output.Duration(in.Uptime)
		}
		data = append(data, replicaJSON{
			ID: in.ID, Host: in.Host, PID: in.PID, Version: in.Version, State: string(in.State),
			StartedAt: in.StartedAt, HeartbeatAt: in.HeartbeatAt, StoppedAt: in.StoppedAt,
			HeartbeatAgeSeconds: in.HeartbeatAge.Seconds(), Gone: in.Gone, Crashed: in.Crashed,
			UptimeSeconds: uptimeSeconds, RunsInFlight: in.RunsInFlight,
			Leases:             leaseCount[in.ID],
			ClockOffsetSeconds: in.ClockOffset,
			HTTPAddr:           optionalString(in.HTTPAddr),
		})
		state, tone := replicaState(in)
		heartbeat := output.Duration(in.HeartbeatAge) + " ago"
		if !p.Terminal() {
			heartbeat = p.Time(in.HeartbeatAt)
		}
		rows = append(rows, []output.Cell{
			{Text: in.ID}, {Text: in.Host}, {Text: strconv.Itoa(in.PID)}, {Text: in.Version}, {Text: state, Tone: tone},
			{Text: heartbeat, Tone: map[bool]output.Tone{true: output.Bad, false: output.Plain}[in.Gone && !in.Crashed && in.State != replicas.StateStopped]},
			{Text: uptime}, {Text: strconv.Itoa(in.RunsInFlight)}, {Text: strconv.Itoa(leaseCount[in.ID])}, {Text: in.HTTPAddr},
		})
	}
	return p.Print(data, replicaColumns, rows)
}

// displayedReplicas returns the replicas as shown: with a fixed display
// clock (STUDIO_NOW), heartbeat ages and uptimes are counted from it, so
// output is stable. Gone and crashed stay the database's judgement.
func displayedReplicas(d deps, infos []replicas.Info) []replicas.Info {
	if !d.NowFixed {
		return infos
	}
	now := d.Now()
	for i := range infos {
		infos[i].HeartbeatAge = now.Sub(infos[i].HeartbeatAt)
		infos[i].Uptime = now.Sub(infos[i].StartedAt)
	}
	return infos
}

// replicasListOptions are the flags and dependencies of replicas list.
type replicasListOptions struct {
	deps
	watchFlags
}

func newReplicasListCmd(a *app, runF func(context.Context, *replicasListOptions) error) *cobra.Command {
	o := &replicasListOptions{deps: a.deps()}
	cmd := &cobra.Command{
		Use:   "list [--watch]",
		Short: "List replicas with state and heartbeat age",
		Example: `  studioctl replicas list
  studioctl replicas list --watch
  studioctl replicas list -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return replicasListRun(cmd.Context(), o)
		},
	}
	o.watchFlags.add(cmd)
	return withFormats(cmd, listFormats...)
}

// replicasListRun prints the replicas, once or, with --watch, on every change.
func replicasListRun(ctx context.Context, o *replicasListOptions) error {
	pool, err := o.DB(ctx)
	if err != nil {
		return err
	}
	return watchList(ctx, o.deps, o.watchFlags, "replicas", func(ctx context.Context) (listView, error) {
		infos, err := replicas.List(ctx, pool)
		if err != nil {
			return listView{}, err
		}
		leaseCount, err := leases.CountByOwner(ctx, pool)
		if err != nil {
			return listView{}, err
		}
		return listView{
			print: func(p *output.Printer) error {
				return printReplicas(p, displayedReplicas(o.deps, infos), leaseCount)
			},
			key: replicasKey(infos, leaseCount),
		}, nil
	})
}

// replicasKey is what replicas list shows minus what moves with every
// heartbeat: the heartbeat time and age, the uptime and the clock offset.
// Gone and crashed stay in: a replica turning gone is a change.
func replicasKey(infos []replicas.Info, leaseCount map[string]int) any {
	type row struct {
		replicas.Info
		Leases int
	}
	key := make([]row, 0, len(infos))
	for _, in := range infos {
		in.HeartbeatAt, in.HeartbeatAge, in.Uptime, in.ClockOffset = time.Time{}, 0, 0, nil
		key = append(key, row{in, leaseCount[in.ID]})
	}
	return key
}

// replicasDrainOptions are the flags, argument and dependencies of replicas drain.
type replicasDrainOptions struct {
	deps
	ID      string
	Wait    bool
	Timeout time.Duration
	Reason  string
	Yes     bool
}

func newReplicasDrainCmd(a *app, runF func(context.Context, *replicasDrainOptions) error) *cobra.Command {
	o := &replicasDrainOptions{deps: a.deps()}
	cmd := &cobra.Command{
		Use:   "drain ID [--wait] [--timeout D] [--reason R] [--yes]",
		Short: "Ask one replica to drain and stop",
		Long: `Write a drain request for one replica (a studio_request row addressed to its
current process, with its audit row) and wake it with a replica.drain
signal; it then drains as on SIGTERM and exits 0. A later process with the
same id is not drained by it, and a request not claimed within 10 minutes
is void (see docs/control.md). --wait blocks until its state is stopped (or it is
gone), for at most --timeout. An unknown id exits 4; a replica that is gone
cannot hear the request (exit 1); a stopped one needs nothing.`,
		Example: `  studioctl replicas drain web-1-3fa2c1 --wait
  studioctl replicas drain web-1-3fa2c1 --reason "kernel upgrade" --yes`,
		Args: exactArgs("id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ID = args[0]
			if o.Timeout <= 0 {
				return usageErrorf("--timeout: must be positive, got %s", o.Timeout)
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return replicasDrainRun(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVar(&o.Wait, "wait", false, "wait until the replica is stopped")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 2*time.Minute, "how long --wait waits")
	cmd.Flags().StringVar(&o.Reason, "reason", "", "why, for the audit log")
	cmd.Flags().BoolVar(&o.Yes, "yes", false, "do not ask for confirmation")
	return cmd
}

// replicasDrainRun asks one replica to drain, and with --wait waits for its stop.
func replicasDrainRun(ctx context.Context, o *replicasDrainOptions) error {
	id := o.ID
	pool, err := o.DB(ctx)
	if err != nil {
		return err
	}
	in, err := replicas.Get(ctx, pool, id)
	if err != nil {
		return err
	}
	if in.State == replicas.StateStopped {
		fmt.Fprintf(o.IO.Err, "replica %q is already stopped; nothing to do\n", id)
		return nil
	}
	ok, err := o.IO.confirm(fmt.Sprintf("drain replica %q on %s (pid %d)?", id, in.Host, in.PID), o.Yes)
	if err != nil || !ok {
		if err == nil {
			fmt.Fprintln(o.IO.Err, "not drained")
		}
		return err
	}
	_, done, err := replicas.RequestDrain(ctx, pool, id, o.Actor(), o.Reason)
	if err != nil {
		return err
	}
	if done {
		// It stopped between the question and the request: nothing written.
		fmt.Fprintf(o.IO.Err, "replica %q is already stopped; nothing to do\n", id)
		return nil
	}
	fmt.Fprintf(o.IO.Out, "asked replica %q to drain\n", id)
	if !o.Wait {
		return nil
	}
	// The deadline is the operator's wait, on this machine's clock.
	deadline := time.Now().Add(o.Timeout)
	for {
		in, err := replicas.Get(ctx, pool, id)
		if err != nil {
			return err
		}
		if in.State == replicas.StateStopped {
			fmt.Fprintf(o.IO.Out, "replica %q stopped\n", id)
			return nil
		}
		if in.Gone {
			return fmt.Errorf("replica %q is gone without recording a stop (crashed while draining?)", id)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %q is still %s after %s", id, in.State, o.Timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(drainWaitPoll):
		}
	}
}

// replicasForgetOptions are the flags, argument and dependencies of replicas forget.
type replicasForgetOptions struct {
	deps
	ID     string
	Reason string
	Yes    bool
	Force  bool
}

func newReplicasForgetCmd(a *app, runF func(context.Context, *replicasForgetOptions) error) *cobra.Command {
	o := &replicasForgetOptions{deps: a.deps()}
	cmd := &cobra.Command{
		Use:   "forget ID [--reason R] [--yes] [--force]",
		Short: "Delete a stopped or gone replica's row",
		Long: `Delete the studio_replica row of a replica that is stopped or gone. A live
replica is refused (exit 3): drain it first, or wait until it is gone. An
unknown id exits 4, and so does an id another forget removed first: the
delete is one conditional statement, so of concurrent forgets exactly one
deletes and writes an audit row.

A row whose heartbeat is more than 5 s ahead of database time is not live
(no replica writes one: they write the database's now()), but it is refused
too (exit 3) unless --force is given: it may be a replica's across a
failover to a server whose clock is behind, which its next heartbeat heals.
--force removes it, and nothing else: a live replica is still refused.`,
		Example: `  studioctl replicas forget web-1-3fa2c1 --reason "host decommissioned"
  studioctl replicas forget ghost --force --reason "row planted with an infinity heartbeat"`,
		Args: exactArgs("id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ID = args[0]
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return replicasForgetRun(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.Reason, "reason", "", "why, for the audit log")
	cmd.Flags().BoolVar(&o.Yes, "yes", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&o.Force, "force", false, "also remove a row whose heartbeat is ahead of database time")
	return cmd
}

// replicasForgetRun deletes a stopped or gone replica's row.
func replicasForgetRun(ctx context.Context, o *replicasForgetOptions) error {
	pool, err := o.DB(ctx)
	if err != nil {
		return err
	}
	in, err := replicas.Get(ctx, pool, o.ID)
	if err != nil {
		return err
	}
	// A row ahead without --force is refused below: no question first.
	if !in.Live && (!in.Ahead || o.Force) {
		what := string(in.State)
		if in.Ahead {
			what += ", heartbeat ahead of database time"
		}
		ok, err := o.IO.confirm(fmt.Sprintf("forget replica %q (%s)?", in.ID, what), o.Yes)
		if err != nil || !ok {
			if err == nil {
				fmt.Fprintln(o.IO.Err, "not forgotten")
			}
			return err
		}
	}
	forget := replicas.Forget
	if o.Force {
		forget = replicas.ForgetForce
	}
	in, err = forget(ctx, pool, o.ID, o.Actor(), o.Reason)
	if err != nil {
		return err
	}
	if in.Ahead {
		fmt.Fprintf(o.IO.Out, "forgot replica %q (%s, heartbeat ahead of database time: %s)\n", in.ID, in.State, in.HeartbeatAt.Format(time.RFC3339))
		return nil
	}
	state, _ := replicaState(in)
	fmt.Fprintf(o.IO.Out, "forgot replica %q (%s, last heartbeat %s)\n", in.ID, state, in.HeartbeatAt.Format(time.RFC3339))
	return nil
}
