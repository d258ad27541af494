package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/spf13/cobra"

	"github.com/terrace-ml/terrace/internal/harness/bench"
)

func benchCmd() *cobra.Command {
	var cpuProfile string
	var stopProfile func() error
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run a benchmark that measures its own baseline in the same run and reports the ratio",
		PersistentPreRunE: func(*cobra.Command, []string) (err error) {
			stopProfile, err = startCPUProfile(cpuProfile)
			return err
		},
		PersistentPostRunE: func(*cobra.Command, []string) error { return stopProfile() },
	}
	cmd.PersistentFlags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (every in-process node, baseline included) to this file, for go tool pprof")
	var wo bench.WireOptions
	var wireReport string
	var wireTLS, appTLS bool
	wire := &cobra.Command{
		Use:   "wire",
		Short: "Dense and sparse push/pull through the parameter server against raw TCP over the same loopback",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if wireTLS {
				if cmd.Flags().Changed("sparse-keys") {
					return errors.New("--sparse-keys with --tls: the TLS measurement is dense only (drop one of them)")
				}
				return benchTLS(cmd, wireReport, func() (*bench.TLSReport, error) { return bench.WireTLS(cmd.Context(), wo, cmd.ErrOrStderr()) })
			}
			out, set, finish := stepBar(cmd.ErrOrStderr(), "rounds")
			wo.Step = func(done, total int) { set(float64(done), total) }
			rep, err := bench.Wire(cmd.Context(), wo, out)
			finish()
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), rep.Summary())
			return writeReport(wireReport, rep)
		},
	}
	wf := wire.Flags()
	wf.IntVar(&wo.DenseBytes, "dense-bytes", 0, "bytes of the dense vector (64 MiB if 0; at most 1 GiB)")
	wf.IntVar(&wo.Rounds, "rounds", 0, "timed rounds per figure; the median is reported (5 if 0)")
	wf.IntVar(&wo.SparseKeys, "sparse-keys", 0, "keys per sparse operation (10,000 if 0)")
	wf.StringVar(&wireReport, "report", "", "write the JSON report to this file")
	wf.BoolVar(&wireTLS, "tls", false, "measure dense push/pull with mutual TLS against plain TCP instead (1 server, 1 worker)")

	var ao bench.AppOptions
	var appReport string
	app := &cobra.Command{
		Use:   "app",
		Short: "Logistic regression examples/s through the parameter server against a plain single-process loop",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if appTLS {
				return benchTLS(cmd, appReport, func() (*bench.TLSReport, error) { return bench.AppTLS(cmd.Context(), ao, cmd.ErrOrStderr()) })
			}
			out, set, finish := stepBar(cmd.ErrOrStderr(), "runs")
			ao.Step = func(done, total int) { set(float64(done), total) }
			rep, err := bench.App(cmd.Context(), ao, out)
			finish()
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), rep.Summary())
			return writeReport(appReport, rep)
		},
	}
	af := app.Flags()
	af.StringVar(&ao.Train, "train", "", "LIBSVM training data (the shipped a9a if empty)")
	af.StringVar(&ao.Test, "test", "", "LIBSVM test data (the shipped a9a.t if empty)")
	af.IntVar(&ao.Epochs, "epochs", 0, "epochs (10 if 0)")
	af.IntVar(&ao.Batch, "batch", 0, "minibatch size (100 if 0)")
	af.IntVar(&ao.Repeats, "repeats", 0, "runs per side, alternating; the median is reported (3 if 0)")
	af.StringVar(&appReport, "report", "", "write the JSON report to this file")
	af.BoolVar(&appTLS, "tls", false, "measure lr through the parameter server with mutual TLS against plain TCP instead")
	af.DurationVar(&ao.ScrapeEvery, "scrape-every", 0, "also run the parameter server with every node's /metrics scraped at this interval, and report the cost (0: not)")
	// The README says every command takes --config; bench did not.
	addConfigFlag(wire)
	addConfigFlag(app)
	cmd.AddCommand(wire, app, benchStragglersCmd())
	return cmd
}

// benchTLS runs a TLS-against-plain benchmark and prints its report.
func benchTLS(cmd *cobra.Command, reportPath string, run func() (*bench.TLSReport, error)) error {
	rep, err := run()
	if err != nil {
		return err
	}
	fmt.Fprintln(cmd.OutOrStdout(), rep.Summary())
	return writeReport(reportPath, rep)
}

// startCPUProfile profiles the process into path until stop is called; a
// no-op for an empty path.
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}
