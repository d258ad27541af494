// Command terrace runs Terrace's coordinator, servers and workers, trains
// whole local clusters, and runs the benchmarks.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/terrace-ml/terrace/internal/process/node"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	root := &cobra.Command{
		Use:           "terrace",
		Short:         "Terrace: an elastic, fault-tolerant parameter server",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(trainCmd(), coordinatorCmd(), serverCmd(), workerCmd(), benchCmd(), planCmd(), replayCmd(),
		submitCmd(), statusCmd(), eventsCmd(), plotCmd(), exportCmd(), predictCmd(), certsCmd(), tokensCmd(), checkpointCmd())
	runCtx := ctx // the command's, once it runs: its cause names a signal
	for _, c := range root.Commands() {
		// Servers and workers turn SIGTERM into a drain (see notices.go);
		// for the other commands it ends the run like an interrupt.
		if c.Name() != "server" && c.Name() != "worker" {
			cancelOnTerm(c, &runCtx)
		}
	}
	checkOutputsFirst(root)
	refuseUnknownSubcommands(root)
	start := time.Now()
	cmd, err := root.ExecuteContextC(ctx)
	if errors.Is(err, node.ErrDrained) {
		fmt.Fprintln(os.Stderr, "terrace: drained; exiting")
		return
	}
	if cause := context.Cause(runCtx); err != nil && cause != nil && cause != context.Canceled { // a signal's cause Is Canceled too
		// A signal ended the run: what failed then failed because of it
		// ("context canceled" deep in a worker's error did not say so).
		err = fmt.Errorf("stopped before the end (%v%s): %w", cause, unwritten(cmd, start), err)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "terrace:", err)
		os.Exit(1)
	}
}

// unwritten says, for a command stopped by a signal, that its --report
// was not written in this run: a replay or bench stopped midway said only
// "stopped before the end", and whether a partial report had been left
// was anyone's guess (none is: reports are written at the end).
func unwritten(c *cobra.Command, start time.Time) string {
	f := c.Flags().Lookup("report")
	if f == nil || f.Value.String() == "" {
		return ""
	}
	path := f.Value.String()
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return "; no report written to " + path
	case fi.ModTime().Before(start):
		return "; no report written: " + path + " is an earlier run's"
	}
	return ""
}

// checkOutputsFirst makes c and every command under it check its output
// flags (checkOutputs) and its --coordinator (checkCoordinatorFlag) before
// it runs, once its --config is applied.
func checkOutputsFirst(c *cobra.Command) {
	for _, sub := range c.Commands() {
		checkOutputsFirst(sub)
	}
	if c.RunE == nil {
		return
	}
	prev := c.PreRunE
	c.PreRunE = func(cmd *cobra.Command, args []string) error {
		if prev != nil {
			if err := prev(cmd, args); err != nil {
				return err
			}
		}
		if err := checkOutputs(cmd); err != nil {
			return err
		}
		return checkCoordinatorFlag(cmd)
	}
}

// refuseUnknownSubcommands makes every command under c that only groups
// others (bench, certs, tokens) refuse a word that names none of them,
// and exit 1: "terrace bench wrie" printed bench's help and exited 0, so
// a typo in a script passed for a run. Alone, such a command still
// prints its help.
func refuseUnknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		refuseUnknownSubcommands(sub)
		if !sub.HasSubCommands() || sub.Runnable() {
			continue
		}
		sub.SuggestionsMinimumDistance = 2 // cobra's own default, set only where it finds commands
		sub.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			err := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				err += fmt.Sprintf(": did you mean %q?", s[0])
			}
			return errors.New(err + " (" + cmd.CommandPath() + " --help lists them)")
		}
	}
}

// cancelOnTerm makes SIGTERM end c's run as an interrupt does; *runCtx
// becomes the run's context.
func cancelOnTerm(c *cobra.Command, runCtx *context.Context) {
	prev := c.PersistentPreRunE
	c.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		ctx, _ := signal.NotifyContext(cmd.Context(), syscall.SIGTERM)
		cmd.SetContext(ctx)
		*runCtx = ctx
		if prev != nil {
			return prev(cmd, args)
		}
		return nil
	}
}
