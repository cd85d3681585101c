package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/studioctl/studioctl/internal/output"
	"github.com/studioctl/studioctl/internal/replicas"
)

// replicasWatchEvery is the refresh interval of replicas list --watch.
const replicasWatchEvery = 2 * time.Second

// drainWaitPoll is how often replicas drain --wait looks at the state.
const drainWaitPoll = 500 * time.Millisecond

func (a *app) newReplicasCmd() *cobra.Command {
	cmd := groupCmd("replicas", "Watch, drain and forget replicas", `Every replica (one studioctl run process) in studio_replica. A replica whose
heartbeat is older than 15 s is gone; gone without a recorded stop is a crash.`)
	cmd.AddCommand(a.newReplicasListCmd(), a.newReplicasDrainCmd(), a.newReplicasForgetCmd())
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
}

var replicaColumns = []output.Column{
	{Header: "ID"}, {Header: "HOST"}, {Header: "PID", Wide: true}, {Header: "VERSION"}, {Header: "STATE"},
	{Header: "HEARTBEAT"}, {Header: "UPTIME"}, {Header: "RUNS"}, {Header: "HTTP", Wide: true},
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

func printReplicas(p *output.Printer, infos []replicas.Info) error {
	data := make([]replicaJSON, 0, len(infos))
	rows := make([][]output.Cell, 0, len(infos))
	for _, in := range infos {
		data = append(data, replicaJSON{
			ID: in.ID, Host: in.Host, PID: in.PID, Version: in.Version, State: string(in.State),
			StartedAt: in.StartedAt, HeartbeatAt: in.HeartbeatAt, StoppedAt: in.StoppedAt,
			HeartbeatAgeSeconds: in.HeartbeatAge.Seconds(), Gone: in.Gone, Crashed: in.Crashed,
		})
		state, tone := replicaState(in)
		uptime := ""
		if in.State != replicas.StateStopped && !in.Gone {
			uptime = output.Duration(in.Uptime)
		}
		heartbeat := output.Duration(in.HeartbeatAge) + " ago"
		if !p.Terminal() {
			heartbeat = p.Time(in.HeartbeatAt)
		}
		rows = append(rows, []output.Cell{
			{Text: in.ID}, {Text: in.Host}, {Text: strconv.Itoa(in.PID)}, {Text: in.Version}, {Text: state, Tone: tone},
			{Text: heartbeat, Tone: map[bool]output.Tone{true: output.Bad, false: output.Plain}[in.Gone && !in.Crashed && in.State != replicas.StateStopped]},
			{Text: uptime}, {Text: strconv.Itoa(in.RunsInFlight)}, {Text: in.HTTPAddr},
		})
	}
	return p.Print(data, replicaColumns, rows)
}

func (a *app) newReplicasListCmd() *cobra.Command {
	var watch bool
	cmd := &cobra.Command{
		Use:   "list [--watch]",
		Short: "List replicas with state and heartbeat age",
		Example: `  studioctl replicas list
  studioctl replicas list --watch
  studioctl replicas list -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			pool, err := a.db(ctx)
			if err != nil {
				return err
			}
			p := a.printer()
			for {
				infos, err := replicas.List(ctx, pool)
				if err != nil {
					if watch && ctx.Err() != nil {
						return nil
					}
					return err
				}
				if watch && p.Terminal() && !p.Structured() {
					fmt.Fprint(a.stdout, "\x1b[H\x1b[2J")
				}
				if err := printReplicas(p, infos); err != nil {
					return err
				}
				if !watch {
					return nil
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(replicasWatchEvery):
				}
				if !p.Terminal() && !p.Structured() {
					fmt.Fprintln(a.stdout)
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "refresh every 2s until interrupted")
	return cmd
}

type replicasDrainOptions struct {
	wait    bool
	timeout time.Duration
	reason  string
	yes     bool
}

func (a *app) newReplicasDrainCmd() *cobra.Command {
	var o replicasDrainOptions
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
			if o.timeout <= 0 {
				return usageErrorf("--timeout: must be positive, got %s", o.timeout)
			}
			return a.drainReplica(cmd.Context(), args[0], o)
		},
	}
	cmd.Flags().BoolVar(&o.wait, "wait", false, "wait until the replica is stopped")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long --wait waits")
	cmd.Flags().StringVar(&o.reason, "reason", "", "why, for the audit log")
	cmd.Flags().BoolVar(&o.yes, "yes", false, "do not ask for confirmation")
	return cmd
}

func (a *app) drainReplica(ctx context.Context, id string, o replicasDrainOptions) error {
	pool, err := a.db(ctx)
	if err != nil {
		return err
	}
	in, err := replicas.Get(ctx, pool, id)
	if err != nil {
		return err
	}
	if in.State == replicas.StateStopped {
		fmt.Fprintf(a.stderr, "replica %q is already stopped; nothing to do\n", id)
		return nil
	}
	ok, err := a.confirm(fmt.Sprintf("drain replica %q on %s (pid %d)?", id, in.Host, in.PID), o.yes)
	if err != nil || !ok {
		if err == nil {
			fmt.Fprintln(a.stderr, "not drained")
		}
		return err
	}
	_, done, err := replicas.RequestDrain(ctx, pool, id, a.actor(), o.reason)
	if err != nil {
		return err
	}
	if done {
		// It stopped between the question and the request: nothing written.
		fmt.Fprintf(a.stderr, "replica %q is already stopped; nothing to do\n", id)
		return nil
	}
	fmt.Fprintf(a.stdout, "asked replica %q to drain\n", id)
	if !o.wait {
		return nil
	}
	deadline := time.Now().Add(o.timeout)
	for {
		in, err := replicas.Get(ctx, pool, id)
		if err != nil {
			return err
		}
		if in.State == replicas.StateStopped {
			fmt.Fprintf(a.stdout, "replica %q stopped\n", id)
			return nil
		}
		if in.Gone {
			return fmt.Errorf("replica %q is gone without recording a stop (crashed while draining?)", id)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %q is still %s after %s", id, in.State, o.timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(drainWaitPoll):
		}
	}
}

func (a *app) newReplicasForgetCmd() *cobra.Command {
	var reason string
	var yes bool
	cmd := &cobra.Command{
		Use:   "forget ID [--reason R] [--yes]",
		Short: "Delete a stopped or gone replica's row",
		Long: `Delete the studio_replica row of a replica that is stopped or gone. A live
replica is refused (exit 3): drain it first, or wait until it is gone. An
unknown id exits 4, and so does an id another forget removed first: the
delete is one conditional statement, so of concurrent forgets exactly one
deletes and writes an audit row.`,
		Example: `  studioctl replicas forget web-1-3fa2c1 --reason "host decommissioned"`,
		Args:    exactArgs("id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			pool, err := a.db(ctx)
			if err != nil {
				return err
			}
			in, err := replicas.Get(ctx, pool, args[0])
			if err != nil {
				return err
			}
			if !in.Live {
				ok, err := a.confirm(fmt.Sprintf("forget replica %q (%s)?", in.ID, in.State), yes)
				if err != nil || !ok {
					if err == nil {
						fmt.Fprintln(a.stderr, "not forgotten")
					}
					return err
				}
			}
			in, err = replicas.Forget(ctx, pool, args[0], a.actor(), reason)
			if err != nil {
				return err
			}
			state, _ := replicaState(in)
			fmt.Fprintf(a.stdout, "forgot replica %q (%s, last heartbeat %s)\n", in.ID, state, in.HeartbeatAt.Format(time.RFC3339))
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit log")
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation")
	return cmd
}
