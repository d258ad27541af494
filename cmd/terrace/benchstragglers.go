package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/terrace-ml/terrace/internal/harness/bench"
	"github.com/terrace-ml/terrace/internal/plotfile"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/table"
)

// benchStragglersCmd is `terrace bench stragglers`: BSP, SSP and SSP with
// rapid reassignment under each straggler pattern, against the
// jitter-free ideal measured in the same run (docs/design/stragglers.md).
func benchStragglersCmd() *cobra.Command {
	var a appFlags
	var o bench.StragglerOptions
	var patterns, plotPath string
	var staleness []int
	var reportPath string
	cmd := &cobra.Command{
		Use:   "stragglers",
		Short: "Runtime under straggler patterns with BSP, SSP and SSP with rapid reassignment, over the jitter-free ideal",
		Long: `Stragglers trains --app on a local cluster of --workers workers once per
consistency and pattern, and reports under patterns.NAME bsp_over_ideal,
ssp_over_ideal (SSP's best --staleness) and rr_over_ideal (that SSP with
rapid reassignment), each divided by the jitter-free run under the same SSP
measured in the same invocation, with each run's test metrics, and the least
ratio any schedule can reach (bound). --plot draws every worker's progress
over time under the first pattern, without and with reassignment.

  terrace bench stragglers --app lr --passes 3 --report stragglers-lr.json
  terrace bench stragglers --app mf --passes 5 --train ../shared/data/ratings/ml-100k/u1.base --test ../shared/data/ratings/ml-100k/u1.test`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// 0 or less took the defaults without a word, and a large count
			// ran away as train's did (checkLocalCluster).
			if err := checkCluster(o.Servers, o.Workers, 1); err != nil {
				return err
			}
			if err := checkLocalCluster(o.Servers, o.Workers); err != nil {
				return err
			}
			if o.Repeats < 1 {
				return fmt.Errorf("--repeats %d: need at least 1", o.Repeats)
			}
			// Each of these was found, or taken, only once every run was
			// done: a --plot of another kind failed the bench at its end,
			// its report unwritten; a negative --work and a --consistency,
			// which the bench sets for each run itself, were taken.
			if plotPath != "" {
				if err := plotfile.Check(plotPath); err != nil {
					return fmt.Errorf("--plot %w", err)
				}
			}
			if o.Work < 0 {
				return fmt.Errorf("--work %v: want 0 or more", o.Work)
			}
			if cmd.Flags().Changed("consistency") {
				return fmt.Errorf("--consistency: the bench runs BSP, and SSP with each --staleness, itself")
			}
			o.Patterns = []string{"one:4x", "random:3x", "machine:5x@2s-6s", "powerlaw:1.5"}
			if patterns != "" {
				o.Patterns = strings.Split(patterns, ",")
			}
			if len(staleness) == 0 {
				staleness = []int{2, 16, 128}
			}
			for _, s := range staleness {
				if s < 0 {
					return fmt.Errorf("--staleness %d: want 0 or more clocks", s)
				}
			}
			o.App, o.Seed, o.Staleness = a.app, a.seed, staleness
			o.Job = func(cons table.Consistency) (node.Job, error) {
				b := a
				b.consistency = cons.String()
				return b.job(nil)
			}
			if _, err := o.Job(table.Consistency{Model: table.BSP}); err != nil {
				return err // bad flags fail before any cluster starts
			}
			out, set, finish := stepBar(cmd.ErrOrStderr(), "runs")
			o.Step = func(done, total int) { set(float64(done), total) }
			rep, err := bench.Stragglers(cmd.Context(), o, out)
			finish()
			if err != nil {
				return err
			}
			names := make([]string, 0, len(rep.Patterns))
			for n := range rep.Patterns {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				r := rep.Patterns[n]
				fmt.Fprintf(cmd.OutOrStdout(), "%s %-18s bsp %.2fx  ssp(%d) %.2fx  rr %.2fx  (ideal %.2fs; bound %.2fx; %d reassignments)\n",
					rep.App, n, r.BSPOverIdeal, r.BestStaleness, r.SSPOverIdeal, r.RROverIdeal, r.Ideal.Seconds, r.Bound, r.RR.Reassignments)
			}
			if err := writeReport(reportPath, rep); err != nil {
				return err
			}
			if plotPath != "" && len(o.Patterns) > 0 {
				r := rep.Patterns[strings.TrimSpace(o.Patterns[0])]
				best := r.SSP[slices.Index(staleness, r.BestStaleness)]
				titles := []string{fmt.Sprintf("%s, %s, %s, no reassignment", rep.App, o.Patterns[0], best.Consistency), fmt.Sprintf("%s, %s, %s, with reassignment", rep.App, o.Patterns[0], r.RR.Consistency)}
				return bench.PlotProgress(plotPath, titles, []*bench.StragglerRun{best, r.RR})
			}
			return nil
		},
	}
	fs := cmd.Flags()
	a.register(fs)
	fs.IntVar(&o.Workers, "workers", 4, "workers")
	fs.IntVar(&o.Servers, "servers", 2, "servers")
	fs.StringVar(&patterns, "patterns", "", "comma-separated straggler patterns (one:4x,random:3x,machine:5x@2s-6s,powerlaw:1.5 if empty)")
	fs.IntSliceVar(&staleness, "staleness", nil, "SSP bounds to try; the fastest is SSP's figure (2,16,128 if empty)")
	fs.IntVar(&o.Repeats, "repeats", 1, "rounds of runs; each figure is the median run's")
	fs.DurationVar(&o.Work, "work", 0, "emulated compute per example, slowed with the rest (100us if 0)")
	fs.StringVar(&plotPath, "plot", "", "write the first pattern's progress plot to this .svg or .png")
	fs.StringVar(&reportPath, "report", "", "write the JSON report to this file")
	return cmd
}
