// Command terrace runs Terrace's coordinator, servers and workers, trains
// whole local clusters, and runs the benchmarks.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{
		Use:           "terrace",
		Short:         "Terrace: an elastic, fault-tolerant parameter server",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(trainCmd(), coordinatorCmd(), serverCmd(), workerCmd(), benchCmd())
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "terrace:", err)
		os.Exit(1)
	}
}
