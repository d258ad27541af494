package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/control/auth"
)

func statusCmd() *cobra.Command {
	var coordinator string
	var watch bool
	var every time.Duration
	var asJSON bool
	var timeout time.Duration
	var sec securityFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the cluster: the job's progress and ETA, and every node's role, address, state and holdings",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if watch && every <= 0 {
				return fmt.Errorf("--every %v: want a positive interval (it polled the coordinator without pause)", every)
			}
			if timeout <= 0 {
				// It asked, and said the coordinator was unreachable.
				return fmt.Errorf("--timeout %v: want a positive duration", timeout)
			}
			cc, _, err := sec.client(coordinator, auth.RoleRead)
			if err != nil {
				return err
			}
			cc.RetryFor = 2 * time.Second
			out := cmd.OutOrStdout()
			tty := isTerminal(out)
			for n := 0; ; n++ {
				qctx, cancel := context.WithTimeout(ctx, timeout)
				st, err := cc.Status(qctx)
				if err != nil && qctx.Err() != nil && ctx.Err() == nil {
					// A coordinator that accepts and never answers (stopped,
					// or wedged) said only "context deadline exceeded", not
					// what a refused one says.
					err = fmt.Errorf("%w: no answer within --timeout %v: %w", api.ErrUnavailable, timeout, err)
				}
				cancel()
				switch {
				case err != nil && !watch:
					return err
				case err != nil:
					fmt.Fprintf(out, "%s  coordinator %s: %v\n", time.Now().Format(time.TimeOnly), coordinator, err)
				case asJSON:
					b, _ := json.MarshalIndent(st, "", "  ")
					fmt.Fprintf(out, "%s\n", b)
				default:
					switch {
					case watch && tty:
						fmt.Fprint(out, "\033[H\033[2J") // clear the screen, as watch(1) does
					case watch && n > 0:
						fmt.Fprintln(out) // a log or a pipe keeps every table, without escapes
					}
					printStatus(out, answered(coordinator, cc.Current()), st)
				}
				if !watch {
					return nil
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(every):
				}
			}
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&coordinator, "coordinator", "127.0.0.1:7070", "coordinator address (several, comma-separated, for replicas)")
	fs.BoolVarP(&watch, "watch", "w", false, "refresh until interrupted")
	fs.DurationVar(&every, "every", time.Second, "with --watch: refresh interval")
	fs.BoolVar(&asJSON, "json", false, "print the status as JSON")
	fs.DurationVar(&timeout, "timeout", 5*time.Second, "give up on a coordinator that does not answer within this time")
	sec.register(fs, false)
	return cmd
}

// printSlotLosses prints the slots that lost every copy, and the share
// of the ring with fewer copies than k.
func printSlotLosses(w io.Writer, st *api.Status) {
	if st.CopiesLost > 0 {
		times := fmt.Sprintf("%d times", st.CopiesLost)
		if st.CopiesLost == 1 {
			times = "once"
		}
		fmt.Fprintf(w, "LOST  every copy of some slots, %s; their acknowledged updates are gone (terrace events: kind lost)\n", times)
		if older := st.CopiesLost - len(st.SlotLosses); older > 0 {
			fmt.Fprintf(w, "  %d older losses: see the timeline\n", older)
		}
		for _, l := range st.SlotLosses {
			slots := "no slot of the first 1024"
			if l.SpreadCount > 0 {
				slots = fmt.Sprintf("%d slots of the first 1024 (%s)", l.SpreadCount, l.Spread)
			}
			fmt.Fprintf(w, "  epoch %d: %s held the only copies of %s and %.2f%% of the ring beyond\n", l.Epoch, strings.Join(l.Servers, " and "), slots, 100*l.Share)
		}
	}
	if st.Rewinds > 0 {
		times := fmt.Sprintf("%d times", st.Rewinds)
		if st.Rewinds == 1 {
			times = "once"
		}
		fmt.Fprintf(w, "REWOUND  the cluster went back to its newest checkpoint after slots lost every copy, %s; the last: %s\n", times, st.LastRewind)
	}
	if st.UnderReplicated > 0 {
		fmt.Fprintf(w, "UNDER-REPLICATED  %.2f%% of the ring has fewer copies than k until its rebuild is reported\n", 100*st.UnderReplicated)
	}
}

// answered names the coordinator that answered, of several given: after a
// failover the status named the whole list, not which replica leads.
func answered(given, current string) string {
	if !strings.Contains(given, ",") || current == "" {
		return given
	}
	if _, host, ok := strings.Cut(current, "://"); ok {
		current = host
	}
	return current + " (leading, of " + given + ")"
}

// epochOf says what the status's epoch number is: under etcd (every
// coordinator process) a revision, which orders placements and does not
// count them, and a reader took 2,360 for that many changes.
func epochOf(st *api.Status) string {
	switch {
	case st.Epoch == st.Epochs:
		return fmt.Sprint(st.Epoch)
	case st.Epochs == 0: // a state saved before epochs were counted
		return fmt.Sprintf("%d (an etcd revision: it orders placements, it does not count them)", st.Epoch)
	}
	return fmt.Sprintf("%d (placement %d; numbered by etcd revision)", st.Epoch, st.Epochs)
}

// printStatus prints st as kubectl prints resources: a summary line, then
// a table of nodes.
func printStatus(w io.Writer, coordinator string, st *api.Status) {
	j := st.Job
	ready := "ready"
	if !st.Ready {
		ready = "forming"
	}
	fmt.Fprintf(w, "COORDINATOR %s  epoch %s  stage %d  %s  events %d\n", coordinator, epochOf(st), st.Stage, ready, st.Events)
	if st.StageReason != "" || st.Switching != "" {
		sw := ""
		if st.Switching != "" {
			sw = "switching " + st.Switching + ": "
		}
		fmt.Fprintf(w, "STAGE %d  %s%s\n", st.Stage, sw, st.StageReason)
	}
	if st.UpdatesAtRisk > 0 {
		fmt.Fprintf(w, "LOST  %d acknowledged updates at fallbacks (of %d at risk)\n", st.UpdatesLost, st.UpdatesAtRisk)
	}
	if n := st.LedgersUnreported; n > 0 {
		fmt.Fprintf(w, "LOST  at least %d acknowledged updates at fallbacks: %d BackupPS ledger(s) died or left before reporting\n", st.UpdatesLost, n)
	}
	printSlotLosses(w, st)
	if j := st.Job; j.Accounted > 0 {
		fmt.Fprintf(w, "EXAMPLES  %d passes accounted: %d repeated, %d skipped\n", j.Accounted, j.Repeated, j.Skipped)
	}
	fmt.Fprintf(w, "MACHINES  reliable %d  transient %d", st.Machines.Reliable, st.Machines.Transient)
	if st.Dollars != nil && st.DollarsPerHour != nil {
		fmt.Fprintf(w, "  cost $%.4f so far, $%.4f/h now", *st.Dollars, *st.DollarsPerHour)
	}
	fmt.Fprintln(w)
	if d := st.Definition; d != nil && d.Job != nil {
		state := "running"
		if d.Done {
			state = "done"
		}
		fmt.Fprintf(w, "DEFINITION  job %d: %s  passes done %d  %s\n", d.Number, describeJob(*d.Job), d.PassesDone, state)
		if r, ok := newestEvaluated(d.Results); ok {
			fmt.Fprintf(w, "EVALUATED  pass %d by rank %d:%s\n", r.Pass, r.Rank, metricsLine(r))
		}
	}
	if c := st.Checkpoint; c != nil {
		fmt.Fprintf(w, "CHECKPOINTS  %s  last committed %s", c.Dir, or(committedString(c), "none"))
		switch {
		case c.InProgress:
			fmt.Fprintf(w, "  checkpoint %d %s: %d/%d servers written", c.Seq, checkpointWhere(c.Pass, c.Inside), c.Written, c.Servers)
		case c.Requested:
			fmt.Fprint(w, "  one requested at the next pass boundary")
		}
		if c.Abandoned != 0 {
			fmt.Fprintf(w, "  last abandoned %d (%s)", c.Abandoned, c.Why)
		}
		fmt.Fprintln(w)
	}
	// Counted from 1, as train's progress counts (the API's Pass from 0);
	// no job, no pass.
	pass := "-"
	if d := st.Definition; d != nil && d.Job != nil {
		pass = fmt.Sprint(j.Pass + 1)
		if d.Done || d.PassesDone >= d.Job.Passes {
			// Every pass trained, a worker still to report: the
			// progress is already past the last pass ("4/3").
			pass = fmt.Sprint(d.PassesDone)
		}
		pass += fmt.Sprintf("/%d", d.Job.Passes)
	}
	fmt.Fprintf(w, "JOB  pass %s  partitions %d/%d  examples %d  rate %.0f rows/s  pass eta %s  job eta %s  staleness %d clocks  workers reported %d/%d\n\n",
		pass, j.Done, j.Partitions, j.Examples, j.Rate, etaString(j.ETA), etaString(j.JobETA), j.Staleness, j.Reported, j.Workers)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tID\tCLASS\tMACHINE\tADDRESS\tSTATE\tMETRICS\tHOLDS")
	for _, n := range st.Nodes {
		holds := n.Holds
		if len(holds) > 60 {
			holds = holds[:57] + "..."
		}
		role := n.Role
		if n.Tier != "" {
			role += "/" + n.Tier
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", role, n.ID, n.Class, or(n.Machine, "-"), or(n.Addr, "-"), n.State, or(n.Metrics, "-"), or(holds, "-"))
	}
	tw.Flush()
}

// newestEvaluated is the evaluation of the highest pass evaluated in this
// run (a restored pass was evaluated in the run that trained it); the
// status table shows it, --json every pass's.
func newestEvaluated(rs []api.PassResult) (api.PassResult, bool) {
	var newest api.PassResult
	found := false
	for _, r := range rs {
		if !r.Restored && (!found || r.Pass > newest.Pass) {
			newest, found = r, true
		}
	}
	return newest, found
}

// committedString names the last committed checkpoint, or "".
func committedString(c *api.CheckpointStatus) string {
	if c.Committed == 0 {
		return ""
	}
	return fmt.Sprintf("%d (%s)", c.Committed, checkpointWhere(c.CommittedPass, c.CommittedInside))
}

// checkpointWhere says where in training a checkpoint was taken: after
// pass (from 0), or inside the next; counted from 1, as people read it.
func checkpointWhere(pass int, inside bool) string {
	if inside {
		return fmt.Sprintf("inside pass %d", pass+2)
	}
	return fmt.Sprintf("after pass %d", pass+1)
}

func eventsCmd() *cobra.Command {
	var coordinator string
	var follow, asJSON bool
	var after uint64
	var sec securityFlags
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Print the coordinator's event timeline: joins, drains, failures, range moves, leases, splits, checkpoints",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			cc, _, err := sec.client(coordinator, auth.RoleRead)
			if err != nil {
				return err
			}
			cc.RetryFor = 2 * time.Second
			if !follow {
				if err := reach(ctx, cc, cmd.ErrOrStderr(), cc.RetryFor); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			var end *api.Event // the cluster's planned end, once seen
			for {
				evs, err := cc.Events(ctx, after, follow)
				if errors.Is(err, api.ErrUnavailable) && end != nil && ctx.Err() == nil {
					// The coordinator exited with its job, as it said it
					// would: nothing more will come (it was retried for
					// 30 s, then an error).
					fmt.Fprintf(cmd.ErrOrStderr(), "terrace: %s, and the coordinator is gone: the cluster shut down as planned\n", end.Cause)
					return nil
				}
				if errors.Is(err, api.ErrUnavailable) && follow && ctx.Err() == nil {
					// A follower rides out a failover or a restart, saying
					// so (it waited 30 s without a word, then failed).
					if err = reach(ctx, cc, cmd.ErrOrStderr(), 30*time.Second); err == nil {
						continue
					}
				}
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				if len(evs) == 0 && !follow && !asJSON && after == 0 {
					// It printed nothing, as if it had failed to reach it.
					fmt.Fprintln(cmd.ErrOrStderr(), "terrace: the coordinator's timeline has no events yet")
				}
				for _, e := range evs {
					after = max(after, e.Seq)
					if e.Kind == api.EventEnd {
						end = &e
					}
					if asJSON {
						b, _ := json.Marshal(e)
						fmt.Fprintf(out, "%s\n", b)
						continue
					}
					fmt.Fprintln(out, formatEvent(e))
				}
				if !follow {
					return nil
				}
			}
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&coordinator, "coordinator", "127.0.0.1:7070", "coordinator address (several, comma-separated, for replicas)")
	fs.BoolVarP(&follow, "follow", "f", false, "wait for new events until interrupted")
	fs.BoolVar(&asJSON, "json", false, "one JSON object a line")
	fs.Uint64Var(&after, "after", 0, "only events numbered above this")
	sec.register(fs, false)
	return cmd
}

func formatEvent(e api.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%5d  %s  epoch %-4d %-10s", e.Seq, e.Time.Format("15:04:05.000"), e.Epoch, e.Kind)
	switch {
	case e.Node != "" && e.Cause != "":
		fmt.Fprintf(&b, " %s: %s", e.Node, e.Cause)
	default:
		fmt.Fprintf(&b, " %s%s", e.Node, e.Cause)
	}
	return b.String()
}

// etaString is an ETA for a person: "-" when unknown, tenths of a second
// below 10 s (a pass often takes less than one), whole seconds above.
func etaString(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
