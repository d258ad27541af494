package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/terrace-ml/terrace/internal/harness/plot"
)

func plotCmd() *cobra.Command {
	var out, eventsPath string
	cmd := &cobra.Command{
		Use:   "plot REPORT --out FILE.svg|FILE.png",
		Short: "Draw a run's report: test metric and training loss against time, with events, faults and stalls on the same axis",
		Long: `Plot reads a report of terrace train (with or without --processes), or a
coordinator's --report with its --events, and draws the test metric and the
training loss by pass over time, above the coordinator's events (joins,
failures, drains, range moves, checkpoints) and the drill's faults. The
format follows --out's extension.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			format := strings.TrimPrefix(strings.ToLower(filepath.Ext(out)), ".")
			if out == "" || format != "svg" && format != "png" {
				return fmt.Errorf("--out %q: want a file ending in .svg or .png", out)
			}
			rep, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			var evs []byte
			if eventsPath != "" {
				if evs, err = os.ReadFile(eventsPath); err != nil {
					return err
				}
			}
			run, err := plot.Parse(rep, evs)
			if errors.Is(err, plot.ErrBadEvents) {
				return fmt.Errorf("--events %s: %w", eventsPath, err)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			f, err := os.Create(out)
			if err != nil {
				return err
			}
			if err := run.Draw(f, format); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "terrace: plotted %d pass(es) and %d event(s) to %s\n", len(run.Passes), len(run.Events), out)
			if len(run.Events) == 0 && eventsPath == "" {
				// A coordinator's report holds none: they are in its
				// --events file, which a user did not know to give.
				fmt.Fprintf(cmd.ErrOrStderr(), "terrace: %s holds no events: a coordinator's are in its --events file (terrace plot %s --events FILE)\n", args[0], args[0])
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "file to write, .svg or .png")
	cmd.Flags().StringVar(&eventsPath, "events", "", "the coordinator's event timeline (its --events file), when the report has none")
	return cmd
}
