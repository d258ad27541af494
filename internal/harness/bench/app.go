package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/terrace-ml/terrace/apps/lr"
	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// AppOptions configure App; zero fields take the defaults.
type AppOptions struct {
	// Train and Test are LIBSVM files; the shipped a9a split, found under
	// the module root, by default.
	Train, Test string
	// Epochs (10) and Batch (100) are lr's.
	Epochs, Batch int
	// Repeats is how many runs each side makes, alternating (3); the
	// report gives the median throughput.
	Repeats int
	// ScrapeEvery, when positive, adds a third side: the parameter server
	// with every node's /metrics fetched at this interval.
	ScrapeEvery time.Duration
	// Step, when set, hears after each run how many of the total are
	// done (for a progress bar).
	Step func(done, total int)
}

func (o AppOptions) withDefaults() (AppOptions, error) {
	if o.Train == "" || o.Test == "" {
		root, err := moduleRoot()
		if err != nil {
			return o, err
		}
		if o.Train == "" {
			o.Train = filepath.Join(root, "datasets", "a9a", "a9a.gz")
		}
		if o.Test == "" {
			o.Test = filepath.Join(root, "datasets", "a9a", "a9a.t.gz")
		}
	}
	if o.Epochs == 0 {
		o.Epochs = 10
	}
	if o.Batch == 0 {
		o.Batch = 100
	}
	if o.Repeats == 0 {
		o.Repeats = 3
	}
	if o.Epochs < 1 || o.Batch < 1 || o.Repeats < 1 {
		return o, fmt.Errorf("bench: epochs %d, batch %d and repeats %d must be positive", o.Epochs, o.Batch, o.Repeats)
	}
	if o.ScrapeEvery < 0 {
		// It ran without the scraped side, as if 0, without a word.
		return o, fmt.Errorf("bench: scrape interval %v: want a positive interval, or 0 for no scraping", o.ScrapeEvery)
	}
	return o, nil
}

// moduleRoot is the nearest directory above the working directory that
// holds go.mod, so that the shipped data is found from any package or from
// the CLI run inside a clone.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("bench: finding the module root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("bench: the shipped a9a lies under the module root, and there is no go.mod above the working directory: give the data (AppOptions.Train and Test; terrace bench app --train and --test), or run inside the repository")
		}
		dir = parent
	}
}

// AppRun is one run of one side.
type AppRun struct {
	Side              string  `json:"side"` // "ps" or "local"
	Examples          int64   `json:"examples"`
	Seconds           float64 `json:"seconds"`
	ExamplesPerSecond float64 `json:"examples_s"`
	TestAUC           float64 `json:"test_auc"`
	TestLogLoss       float64 `json:"test_logloss"`
	// CPUMicrosPerExample is the process's CPU time (every node of the
	// cluster, and the scraper) over lr's run, test evaluations included,
	// per example trained: the parameter server's sides only. Other
	// processes' load slows a run's wall time far more than its CPU time,
	// so this is the figure that resolves a scrape's cost on a shared
	// machine.
	CPUMicrosPerExample float64 `json:"cpu_us_per_example,omitempty"`
}

// AppReport is the result of App. Throughput counts training time only:
// shuffling, minibatches and updates, and for the parameter server its
// end-of-epoch flush and barrier, but not loading data, starting the
// cluster or the per-epoch test evaluation.
type AppReport struct {
	Train       string `json:"train"`
	Test        string `json:"test"`
	Epochs      int    `json:"epochs"`
	Batch       int    `json:"batch"`
	Repeats     int    `json:"repeats"`
	Statistic   string `json:"statistic"`
	Consistency string `json:"consistency"`

	// PSExamplesPerSec is lr.Run on one worker and one server; the
	// baseline LocalExamplesPerSec is the same minibatch loop in one
	// process on a local model. Ratio is PS/local (target >= 0.8).
	PSExamplesPerSec    float64 `json:"ps_examples_s"`
	LocalExamplesPerSec float64 `json:"local_examples_s"`
	Ratio               float64 `json:"ratio"`
	// Test metrics after the last epoch of the last run of each side.
	PSTestAUC        float64 `json:"ps_test_auc"`
	LocalTestAUC     float64 `json:"local_test_auc"`
	PSTestLogLoss    float64 `json:"ps_test_logloss"`
	LocalTestLogLoss float64 `json:"local_test_logloss"`
	// PSRefused counts updates the servers refused as non-finite.
	PSRefused int64 `json:"ps_refused_non_finite"`
	// PSScrapedExamplesPerSec is the parameter server's throughput with
	// every node scraped each ScrapeEvery, and ScrapeCost the fraction of
	// throughput that costs (1 - scraped/unscraped).
	ScrapeEvery             string  `json:"scrape_every,omitempty"`
	PSScrapedExamplesPerSec float64 `json:"ps_scraped_examples_s,omitempty"`
	ScrapeCost              float64 `json:"scrape_cost,omitempty"`
	// PSCPUMicrosPerExample and PSScrapedCPUMicrosPerExample are the
	// medians of the two sides' CPU per example, and ScrapeCPUCost the
	// CPU the scrapes add per example (scraped/unscraped - 1).
	PSCPUMicrosPerExample        float64 `json:"ps_cpu_us_per_example,omitempty"`
	PSScrapedCPUMicrosPerExample float64 `json:"ps_scraped_cpu_us_per_example,omitempty"`
	ScrapeCPUCost                float64 `json:"scrape_cpu_cost,omitempty"`

	Runs []AppRun `json:"runs"`

	GoVersion  string    `json:"go_version"`
	GOMAXPROCS int       `json:"gomaxprocs"`
	NumCPU     int       `json:"num_cpu"`
	Timestamp  time.Time `json:"timestamp"`
	Seconds    float64   `json:"seconds"`
}

// Summary is the report for people.
func (r *AppReport) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "lr benchmark, %s of %d runs each, %d epochs, batch %d, %s, %s, GOMAXPROCS %d, %s\n", r.Statistic, r.Repeats, r.Epochs, r.Batch, r.Consistency, r.GoVersion, r.GOMAXPROCS, r.Timestamp.Format(time.RFC3339))
	fmt.Fprintf(&b, "  parameter server 1s1w %10.0f examples/s  test AUC %.4f  log loss %.4f\n", r.PSExamplesPerSec, r.PSTestAUC, r.PSTestLogLoss)
	fmt.Fprintf(&b, "  local loop            %10.0f examples/s  test AUC %.4f  log loss %.4f\n", r.LocalExamplesPerSec, r.LocalTestAUC, r.LocalTestLogLoss)
	fmt.Fprintf(&b, "  ratio                 %10.2f (target >= 0.8)\n", r.Ratio)
	if r.ScrapeEvery != "" {
		fmt.Fprintf(&b, "  scraped every %-7s %10.0f examples/s  cost %.1f%% of the unscraped throughput\n", r.ScrapeEvery, r.PSScrapedExamplesPerSec, 100*r.ScrapeCost)
		fmt.Fprintf(&b, "  CPU per example          %.3f µs scraped, %.3f µs not: the scrapes add %.1f%%\n",
			r.PSScrapedCPUMicrosPerExample, r.PSCPUMicrosPerExample, 100*r.ScrapeCPUCost)
	}
	return b.String()
}

// App measures logistic regression through the parameter server (lr.Run,
// ASP, so lr prefetches the next minibatches' weights) against the same minibatch
// loop in one process, alternating the two so that both see the same load.
func App(ctx context.Context, o AppOptions, progress io.Writer) (*AppReport, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	w := orDiscard(progress)
	start := time.Now()
	cfg := appConfig(o)
	rep := &AppReport{
		Train: o.Train, Test: o.Test, Epochs: o.Epochs, Batch: o.Batch, Repeats: o.Repeats,
		Statistic: "median", Consistency: cfg.Consistency.String(),
		GoVersion: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(), Timestamp: start.UTC(),
	}
	train, test, err := readData(o)
	if err != nil {
		return nil, err
	}
	log := logger(w)
	var psRates, localRates, scrapedRates, psCPU, scrapedCPU []float64
	sides := 2
	if o.ScrapeEvery > 0 {
		sides = 3
	}
	done := 0
	step := func() {
		done++
		if o.Step != nil {
			o.Step(done, sides*o.Repeats)
		}
	}
	for i := range o.Repeats {
		loc, err := runLocal(train, test, cfg)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(w, "run %d/%d: local %.0f examples/s, test AUC %.4f\n", i+1, o.Repeats, loc.ExamplesPerSecond, loc.TestAUC)
		step()
		psr, refused, err := runPS(ctx, cfg, log)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(w, "run %d/%d: ps    %.0f examples/s, test AUC %.4f, %.3f µs CPU/example\n", i+1, o.Repeats, psr.ExamplesPerSecond, psr.TestAUC, psr.CPUMicrosPerExample)
		step()
		rep.Runs = append(rep.Runs, loc, psr)
		localRates, psRates = append(localRates, loc.ExamplesPerSecond), append(psRates, psr.ExamplesPerSecond)
		rep.LocalTestAUC, rep.LocalTestLogLoss = loc.TestAUC, loc.TestLogLoss
		rep.PSTestAUC, rep.PSTestLogLoss = psr.TestAUC, psr.TestLogLoss
		rep.PSRefused += refused
		if o.ScrapeEvery > 0 {
			scr, _, err := runPSScraped(ctx, cfg, log, o.ScrapeEvery)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(w, "run %d/%d: ps, scraped every %v: %.0f examples/s, %.3f µs CPU/example\n", i+1, o.Repeats, o.ScrapeEvery, scr.ExamplesPerSecond, scr.CPUMicrosPerExample)
			step()
			scr.Side = "ps-scraped"
			rep.Runs = append(rep.Runs, scr)
			scrapedRates = append(scrapedRates, scr.ExamplesPerSecond)
			psCPU, scrapedCPU = append(psCPU, psr.CPUMicrosPerExample), append(scrapedCPU, scr.CPUMicrosPerExample)
		}
	}
	if o.ScrapeEvery > 0 {
		rep.ScrapeEvery, rep.PSScrapedExamplesPerSec = o.ScrapeEvery.String(), medianFloat(scrapedRates)
		rep.ScrapeCost = 1 - rep.PSScrapedExamplesPerSec/medianFloat(psRates)
		rep.PSCPUMicrosPerExample, rep.PSScrapedCPUMicrosPerExample = medianFloat(psCPU), medianFloat(scrapedCPU)
		if rep.PSCPUMicrosPerExample > 0 {
			rep.ScrapeCPUCost = rep.PSScrapedCPUMicrosPerExample/rep.PSCPUMicrosPerExample - 1
		}
	}
	rep.PSExamplesPerSec, rep.LocalExamplesPerSec = medianFloat(psRates), medianFloat(localRates)
	rep.Ratio = rep.PSExamplesPerSec / rep.LocalExamplesPerSec
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

// appConfig is lr's default configuration under ASP.
func appConfig(o AppOptions) lr.Config {
	cfg := lr.DefaultConfig()
	cfg.Train, cfg.Test = o.Train, o.Test
	cfg.Passes, cfg.Batch = o.Epochs, o.Batch
	cfg.Consistency = table.Consistency{Model: table.ASP}
	return cfg
}

func readData(o AppOptions) (train, test *data.Sparse, err error) {
	if train, err = data.ReadLIBSVM(o.Train); err != nil {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	if test, err = data.ReadLIBSVM(o.Test); err != nil {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	return train, test, nil
}

// runPS trains with lr.Run on a fresh one-server, one-worker cluster, so
// that every run starts from an empty model. Its time is the sum of lr's
// epoch times, which leave out the test evaluation after each epoch.
func runPS(ctx context.Context, cfg lr.Config, log *slog.Logger) (AppRun, int64, error) {
	return runPSScraped(ctx, cfg, log, 0)
}

// runPSScraped is runPS with every node's /metrics scraped each scrape
// (none if 0).
func runPSScraped(ctx context.Context, cfg lr.Config, log *slog.Logger, scrape time.Duration) (AppRun, int64, error) {
	var rep *lr.Report
	var cpu time.Duration
	err := onWorker(ctx, 1, log, func(ctx context.Context, l *node.Local, c *ps.Client) error {
		if scrape > 0 {
			stop, err := scrapeCluster(ctx, l, c, scrape)
			if err != nil {
				return err
			}
			defer stop()
		}
		var err error
		c0 := processCPU()
		rep, err = lr.Run(ctx, c, cfg)
		cpu = processCPU() - c0
		return err
	})
	if err != nil {
		return AppRun{}, 0, fmt.Errorf("bench: lr through the parameter server: %w", err)
	}
	if len(rep.Passes) != cfg.Passes {
		return AppRun{}, 0, fmt.Errorf("bench: lr reported %d passes of %d", len(rep.Passes), cfg.Passes)
	}
	run := AppRun{Side: "ps", Examples: rep.Examples, TestAUC: rep.TestAUC, TestLogLoss: rep.TestLogLoss}
	for _, e := range rep.Passes {
		run.Seconds += e.Seconds
	}
	run.ExamplesPerSecond = float64(run.Examples) / run.Seconds
	if run.Examples > 0 {
		run.CPUMicrosPerExample = float64(cpu.Microseconds()) / float64(run.Examples)
	}
	return run, rep.Refused, nil
}

func medianFloat(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 0 {
		return (s[m-1] + s[m]) / 2
	}
	return s[m]
}
