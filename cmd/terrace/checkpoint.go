package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/control/auth"
)

// Errors of terrace checkpoint --wait, for callers and tests.
var (
	errCheckpointAbandoned = errors.New("checkpoint abandoned")
	errCheckpointNever     = errors.New("checkpoint will not be taken")
)

func checkpointCmd() *cobra.Command {
	var coordinator string
	var wait, asJSON, now bool
	var timeout time.Duration
	var sec securityFlags
	cmd := &cobra.Command{
		Use:   "checkpoint",
		Short: "Take a cluster checkpoint at the next pass boundary, or --now inside the pass (at once if the job is done); --wait follows it to its commit",
		Long: `Asks the coordinator for a cluster checkpoint into its --checkpoint-dir. Checkpoints are
taken at pass boundaries, when the model is consistent; a finished job's model is
checkpointed at once. With --now the checkpoint is taken inside the pass in progress,
holding no work: a resume from it trains the pass's rows from the offsets the workers
had recorded when it began, and may train again some rows after them (the model may
hold their updates already). With --wait, the command shows the pass it waits for and the
servers writing (a progress bar on a terminal, a line per step otherwise) and exits
0 once the checkpoint is committed, non-zero if it is abandoned or cannot be taken.
Needs the admin role on a cluster with tokens.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout < 0 {
				// Taken as 0: waited as long as it took.
				return fmt.Errorf("--timeout %v: want a positive duration, or 0 to wait as long as it takes", timeout)
			}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			cc, _, err := sec.client(coordinator, auth.RoleAdmin)
			if err != nil {
				return err
			}
			cc.RetryFor = 30 * time.Second
			// The user's own --timeout, too short for the asking, is named:
			// --timeout 1ms said the live coordinator "accepts
			// connections but does not answer".
			unasked := func(err error) error {
				if timeout > 0 && ctx.Err() != nil {
					return fmt.Errorf("checkpoint: not asked for within --timeout %s: %w", timeout, err)
				}
				return fmt.Errorf("checkpoint: %w", err)
			}
			if err := reach(ctx, cc, cmd.ErrOrStderr(), cc.RetryFor); err != nil {
				return unasked(err)
			}
			seq, err := cc.RequestCheckpoint(ctx, now)
			if err != nil {
				return unasked(err)
			}
			out := cmd.OutOrStdout()
			switch {
			case !asJSON:
				fmt.Fprintf(out, "terrace: checkpoint %d asked for\n", seq)
			case !wait:
				b, _ := json.Marshal(api.CheckpointTicket{Seq: seq})
				fmt.Fprintf(out, "%s\n", b)
			}
			if !wait {
				return nil
			}
			res, err := waitCheckpoint(ctx, cc, seq, out, asJSON)
			if err != nil {
				if ctx.Err() != nil && timeout > 0 {
					return fmt.Errorf("checkpoint %d: not committed within --timeout %s: %w", seq, timeout, err)
				}
				return err
			}
			if asJSON {
				b, _ := json.MarshalIndent(res, "", "  ")
				fmt.Fprintf(out, "%s\n", b)
				return nil
			}
			fmt.Fprintf(out, "terrace: checkpoint %d committed %s in %s (%s)\n", res.Seq, checkpointWhere(res.Pass, res.Inside),
				time.Duration(res.Seconds*float64(time.Second)).Round(time.Millisecond), res.Dir)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&coordinator, "coordinator", "127.0.0.1:7070", "coordinator address (several, comma-separated, for replicas)")
	fs.BoolVar(&now, "now", false, "checkpoint inside the pass in progress, not at its end")
	fs.BoolVar(&wait, "wait", false, "wait until the checkpoint is committed, showing its progress")
	fs.DurationVar(&timeout, "timeout", 0, "give up after this long, reaching the coordinator included (with --wait: until the commit; 0: wait as long as it takes)")
	fs.BoolVar(&asJSON, "json", false, "print JSON: the checkpoint asked for, or with --wait the committed one (pass counted from 0 as the API counts it, passes_done the passes it holds; no progress)")
	sec.register(fs, false)
	return cmd
}

// checkpointResult is a committed checkpoint, as --wait reports it. Its
// Pass counts from 0, as the API's; PassesDone is the number of passes
// it holds (Pass+1), the figure the lines for people and train's
// progress give.
type checkpointResult struct {
	Seq        uint64 `json:"seq"`
	Pass       int    `json:"pass"`
	PassesDone int    `json:"passes_done"`
	// Inside: taken inside pass Pass+1 (--now), holding what its workers
	// had recorded of it.
	Inside  bool    `json:"inside,omitempty"`
	Dir     string  `json:"dir"`
	Seconds float64 `json:"seconds"`
}

// checkpointStep is where a checkpoint stands: waiting for its pass
// boundary, or written by some of its servers; done counts both
// partitions of the pass trained and servers written, of total.
type checkpointStep struct {
	what        string
	done, total int
}

// stepOf reads checkpoint seq's step from st: finished is true once it
// is committed (err nil) or cannot be (err set). A later checkpoint
// committed serves the request too: it holds every update before it.
func stepOf(st *api.Status, seq uint64) (step checkpointStep, finished bool, err error) {
	c := st.Checkpoint
	switch {
	case c == nil:
		return step, true, fmt.Errorf("%w: the coordinator has no checkpoint directory", errCheckpointNever)
	case c.Committed >= seq:
		return step, true, nil
	case c.Abandoned >= seq:
		return step, true, fmt.Errorf("checkpoint %d: %w: %s", c.Abandoned, errCheckpointAbandoned, c.Why)
	case c.Seq >= seq && !c.InProgress:
		return step, true, fmt.Errorf("checkpoint %d: %w: it ended neither committed nor abandoned", seq, errCheckpointNever)
	case c.Seq < seq && !c.Requested:
		return step, true, fmt.Errorf("checkpoint %d: %w: the request was dropped (a next job began before it)", seq, errCheckpointNever)
	}
	servers := c.Servers
	if servers == 0 {
		for _, n := range st.Nodes {
			if n.Role == api.RoleServer && n.State == "serving" {
				servers++
			}
		}
	}
	parts := st.Job.Partitions
	if c.InProgress && c.Seq == seq {
		return checkpointStep{fmt.Sprintf("checkpoint %d %s: servers writing %d/%d", seq, checkpointWhere(c.Pass, c.Inside), c.Written, c.Servers),
			parts + c.Written, parts + c.Servers}, false, nil
	}
	return checkpointStep{fmt.Sprintf("checkpoint %d: waiting for pass %d to end (%d/%d partitions)", seq, st.Job.Pass+1, st.Job.Done, parts),
		st.Job.Done, parts + servers}, false, nil
}

// waitCheckpoint follows checkpoint seq in the coordinator's status until
// it is committed, showing its steps on out: a bar on a terminal, a line
// per change of step otherwise (nothing with quiet).
func waitCheckpoint(ctx context.Context, cc *api.Client, seq uint64, w io.Writer, quiet bool) (checkpointResult, error) {
	tty := !quiet && isTerminal(w)
	// Polled every 50 ms at first, then less often, up to once a second:
	// polled once a second from the start, a checkpoint committed in 30 ms
	// was reported as committed in 1.00 s.
	every, most := 50*time.Millisecond, time.Second
	if tty {
		most = barEvery
	}
	pout := &progressOut{w: w}
	var bar *progressbar.ProgressBar
	defer func() {
		if bar != nil {
			bar.Finish()
			fmt.Fprintln(pout)
		}
	}()
	start, last := time.Now(), ""
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		st, err := cc.Status(ctx)
		if err != nil {
			return checkpointResult{}, fmt.Errorf("checkpoint %d: following it: %w", seq, err)
		}
		step, finished, err := stepOf(st, seq)
		if finished {
			if err != nil {
				return checkpointResult{}, err
			}
			c := st.Checkpoint
			return checkpointResult{Seq: c.Committed, Pass: c.CommittedPass, PassesDone: c.CommittedPass + 1, Inside: c.CommittedInside,
				Dir: c.Dir, Seconds: time.Since(start).Seconds()}, nil
		}
		switch {
		case quiet:
		case tty:
			if bar == nil {
				bar = progressbar.NewOptions(step.total, progressbar.OptionSetWriter(barSink{pout}), progressbar.OptionSetElapsedTime(true),
					progressbar.OptionSetPredictTime(false), progressbar.OptionSetWidth(30), progressbar.OptionThrottle(barEvery))
			}
			bar.ChangeMax(step.total)
			bar.Describe(step.what)
			bar.Set(step.done)
		case step.what != last:
			fmt.Fprintf(w, "terrace: %s\n", step.what)
			last = step.what
		}
		select {
		case <-ctx.Done():
			return checkpointResult{}, fmt.Errorf("checkpoint %d: %w", seq, ctx.Err())
		case <-t.C:
		}
		every = min(2*every, most)
		t.Reset(every)
	}
}
