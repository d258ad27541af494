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
	for _, c := range root.Commands() {
		// Servers and workers turn SIGTERM into a drain (see notices.go);
		// for the other commands it ends the run like an interrupt.
		if c.Name() != "server" && c.Name() != "worker" {
			cancelOnTerm(c)
		}
	}
	err := root.ExecuteContext(ctx)
	if errors.Is(err, node.ErrDrained) {
		fmt.Fprintln(os.Stderr, "terrace: drained; exiting")
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "terrace:", err)
		os.Exit(1)
	}
}

func cancelOnTerm(c *cobra.Command) {
	prev := c.PersistentPreRunE
	c.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		ctx, _ := signal.NotifyContext(cmd.Context(), syscall.SIGTERM)
		cmd.SetContext(ctx)
		if prev != nil {
			return prev(cmd, args)
		}
		return nil
	}
}
