package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/terrace-ml/terrace/node"
	"github.com/terrace-ml/terrace/server"
)

// trainReport is the JSON report of `terrace train`.
type trainReport struct {
	App               string                  `json:"app"`
	Config            map[string]any          `json:"config"`
	Seconds           float64                 `json:"seconds"`
	Examples          int64                   `json:"examples"`
	ExamplesPerSecond float64                 `json:"examples_per_second"`
	TestAccuracy      *float64                `json:"test_accuracy,omitempty"`
	TestLogLoss       *float64                `json:"test_logloss,omitempty"`
	TestAUC           *float64                `json:"test_auc,omitempty"`
	TestRMSE          *float64                `json:"test_rmse,omitempty"`
	Workers           map[int]json.RawMessage `json:"workers"`
	Servers           map[string]server.Stats `json:"servers"`
}

func trainCmd() *cobra.Command {
	var a appFlags
	var servers, workers, partitions, replication int
	var reportPath, logLevel string
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Train an application on a local cluster (coordinator, servers, workers) that this command starts",
		Long: `Train starts a coordinator, --servers servers and --workers workers on loopback TCP
in this process, trains --app on --train, evaluates on --test after every epoch,
prints progress and a summary, and writes a JSON report to --report.

With no flags it trains sparse logistic regression on the a9a data the project ships.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			job, err := a.job(out)
			if err != nil {
				return err
			}
			log := newLogger(logLevel)
			fmt.Fprintf(out, "terrace: training %s on %d server(s) and %d worker(s), consistency %s\n", a.app, servers, workers, a.consistency)
			start := time.Now()
			l, err := node.StartLocal(ctx, node.LocalConfig{Servers: servers, Workers: workers, Partitions: partitions, Replication: replication, Logger: log})
			if err != nil {
				return err
			}
			reps, err := l.RunWorkers(ctx, job)
			secs := time.Since(start).Seconds()
			stats := map[string]server.Stats{}
			for i, s := range l.Servers {
				stats[fmt.Sprintf("server-%d", i)] = s.Stats()
			}
			if cerr := l.Close(); err == nil && cerr != nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			rep, err := buildReport(a, cmd, secs, reps, stats)
			if err != nil {
				return err
			}
			printSummary(out, rep)
			return writeReport(reportPath, rep)
		},
	}
	fs := cmd.Flags()
	a.register(fs)
	fs.IntVar(&servers, "servers", 2, "number of servers")
	fs.IntVar(&workers, "workers", 2, "number of workers")
	fs.IntVar(&partitions, "partitions", 0, "data partitions (4 per worker if 0)")
	fs.IntVar(&replication, "replication", 2, "servers holding each key slot (k); a push is acknowledged once all k have it")
	fs.StringVar(&reportPath, "report", "", "write the JSON report to this file")
	fs.StringVar(&logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	addConfigFlag(cmd)
	return cmd
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelWarn
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

// buildReport merges the workers' reports: examples add up, and the test
// metrics are rank 0's.
func buildReport(a appFlags, cmd *cobra.Command, secs float64, reps map[int]json.RawMessage, stats map[string]server.Stats) (*trainReport, error) {
	rep := &trainReport{App: a.app, Config: map[string]any{}, Seconds: secs, Workers: reps, Servers: stats}
	cmd.Flags().VisitAll(func(f *pflag.Flag) { rep.Config[f.Name] = f.Value.String() })
	for rank, raw := range reps {
		var w struct {
			Examples     int64    `json:"examples"`
			TestAccuracy *float64 `json:"test_accuracy"`
			TestLogLoss  *float64 `json:"test_logloss"`
			TestAUC      *float64 `json:"test_auc"`
			TestRMSE     *float64 `json:"test_rmse"`
		}
		if err := json.Unmarshal(raw, &w); err != nil {
			return nil, fmt.Errorf("report of rank %d: %w", rank, err)
		}
		rep.Examples += w.Examples
		if rank == 0 {
			rep.TestAccuracy, rep.TestLogLoss, rep.TestAUC, rep.TestRMSE = w.TestAccuracy, w.TestLogLoss, w.TestAUC, w.TestRMSE
		}
	}
	rep.ExamplesPerSecond = float64(rep.Examples) / secs
	return rep, nil
}

func printSummary(w io.Writer, r *trainReport) {
	fmt.Fprintf(w, "terrace: %s trained %d examples in %.2fs (%.0f examples/s)\n", r.App, r.Examples, r.Seconds, r.ExamplesPerSecond)
	if r.TestAUC != nil {
		fmt.Fprintf(w, "terrace: test accuracy %.4f  logloss %.4f  AUC %.4f\n", *r.TestAccuracy, *r.TestLogLoss, *r.TestAUC)
	}
	if r.TestRMSE != nil {
		fmt.Fprintf(w, "terrace: test RMSE %.4f\n", *r.TestRMSE)
	}
	for id, s := range r.Servers {
		fmt.Fprintf(w, "terrace: %s: %d keys, %d pushes, %d pulls, %d refused non-finite\n", id, s.Keys, s.Pushes, s.Pulls, s.Refused)
	}
}

func writeReport(path string, v any) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}
