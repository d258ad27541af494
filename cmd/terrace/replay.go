package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/terrace-ml/terrace/internal/market/billing"
	"github.com/terrace-ml/terrace/internal/market/history"
	"github.com/terrace-ml/terrace/internal/market/jobsim"
	"github.com/terrace-ml/terrace/internal/market/policy"
	"github.com/terrace-ml/terrace/internal/market/replay"
	"github.com/terrace-ml/terrace/internal/market/trace"
	"github.com/terrace-ml/terrace/internal/plotfile"
)

type replayFlags struct {
	prices, preemptions, onDemand, marketName, provider, product string
	policy, app, from, span, plot, report, calibration, design   string
	passes, speedup, bid                                         float64
	simulate                                                     bool
	starts                                                       int
	real                                                         realFlags
}

func replayCmd() *cobra.Command {
	var f replayFlags
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Run a training job under each buying policy over a spot price (and preemption) trace and report what it cost",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runReplay(cmd, f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.prices, "prices", "", "price histories, comma-separated, read as one: the CSV of ../shared/data/spot or AWS describe-spot-price-history JSON (may be .gz)")
	fs.StringVar(&f.preemptions, "preemptions", "", "preemption or availability traces, comma-separated, assigned to the markets in turn: Bamboo's ms,add|remove,node CSV, Bamboo's GCP 'date, time, count' lines or SkyPilot's JSON (told apart by content)")
	fs.StringVar(&f.onDemand, "ondemand-prices", "", "on-demand prices TYPE=PRICE,... (dollars per hour; override the trace's)")
	fs.StringVar(&f.marketName, "market", "bid2015", "market model: bid2015 (evicted when the price passes the bid, hourly billing) or persecond (evicted by the preemption trace, per-second billing)")
	fs.StringVar(&f.provider, "provider", "aws", "the per-second market's cloud: aws (120 s notice) or gcp (30 s)")
	fs.StringVar(&f.product, "product", "", "keep only price rows of this product description (e.g. Linux/UNIX)")
	fs.StringVar(&f.policy, "policy", "", "ondemand, checkpoint, tiers, bidbrain or all")
	fs.StringVar(&f.design, "design", policy.DesignAuto, "BidBrain's design: auto (chosen by its objective at the start), tiers (a reliable tier, Proteus's) or elastic (none: every machine a server that drains on notice, with checkpoints)")
	fs.StringVar(&f.app, "app", "lr", "the app whose work the calibration file describes")
	fs.Float64Var(&f.passes, "passes", 10, "passes over the app's data")
	fs.Float64Var(&f.passes, "epochs", 10, "alias of --passes")
	fs.StringVar(&f.from, "from", "", "start of the segment (RFC 3339 or 2006-01-02; default: 14 days into the trace, or half of a shorter one)")
	fs.StringVar(&f.span, "for", "", "length of the segment over which starts are spread (e.g. 720h or 30d; default: to the trace's end)")
	fs.Float64Var(&f.speedup, "speedup", 3600, "trace seconds per wall second in the real replay (and in its simulation, with a calibration measured at a speedup)")
	fs.BoolVar(&f.simulate, "simulate", false, "replay with the calibrated model of the job instead of the real system")
	fs.IntVar(&f.starts, "starts", 1, "start times spread evenly over the segment")
	fs.Float64Var(&f.bid, "bid", 0, "fixed bid of the checkpoint and tiers policies, dollars per hour (default: the on-demand price)")
	fs.StringVar(&f.calibration, "calibration", "", "calibration JSON of the simulated job (defaults: jobsim.DefaultCalibration)")
	fs.StringVar(&f.plot, "plot", "", "write a plot of price, bid, machines by class, stage and dollars over time (.svg or .png)")
	fs.StringVar(&f.report, "report", "", "write the JSON report to this file")
	f.real.register(fs)
	return cmd
}

func runReplay(cmd *cobra.Command, f replayFlags) error {
	if err := f.check(); err != nil {
		return err
	}
	if !f.simulate {
		if err := f.checkReal(); err != nil {
			return err
		}
	} else if name := f.real.given(); name != "" {
		return fmt.Errorf("--%s is for a real replay: --simulate runs the calibrated model of the job, no processes", name)
	}
	cfg, names, err := f.config(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	out, set, finish := stepBar(cmd.ErrOrStderr(), "runs")
	defer finish()
	cfg.Progress, cfg.Advance = out, set
	starts, err := f.startTimes(cfg.Prices)
	if err != nil {
		return err
	}
	if !f.simulate {
		finish()
		return runRealReplay(cmd, f, cfg, names, starts[0])
	}
	total := cfg.Updates
	fmt.Fprintf(out, "replay: %d policies x %d starts, %.3g updates (%s, %g passes), %s market, %d markets in %s\n",
		len(names), len(starts), total, f.app, f.passes, f.marketName, len(cfg.Prices.Series), f.prices)
	rep, err := replay.Sweep(cmd.Context(), cfg, names, starts)
	finish()
	if err != nil {
		return err
	}
	rep.Market, rep.Prices, rep.App, rep.Passes, rep.Updates, rep.Simulated, rep.Calibration = f.marketName, f.prices, f.app, f.passes, total, true, cfg.Cal
	rep.Provider, rep.Preemptions = f.providerName(), f.preemptions
	rep.Summary(cmd.OutOrStdout(), names)
	if f.plot != "" {
		if err := replay.Plot(f.plot, rep, names); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
	}
	return writeReport(f.report, rep)
}

func (f replayFlags) check() error {
	switch {
	case f.prices == "":
		return errors.New("--prices is required")
	case f.report == "":
		return errors.New("--report is required")
	case f.policy == "":
		return errors.New("--policy is required: ondemand, checkpoint, tiers, bidbrain or all")
	case f.bid < 0:
		return fmt.Errorf("--bid %g: a bid below zero", f.bid)
	case math.IsNaN(f.bid) || math.IsInf(f.bid, 0):
		// NaN passed every comparison, and the replay ran on it.
		return fmt.Errorf("--bid %g: want dollars per hour", f.bid)
	case f.provider != "aws" && f.provider != "gcp":
		// Taken without a word in the bid2015 market, which has none.
		return fmt.Errorf("--provider %q: want aws or gcp", f.provider)
	case !slices.Contains(policy.Designs, f.design):
		return fmt.Errorf("--design %q: want %s", f.design, strings.Join(policy.Designs, ", "))
	case f.starts < 1:
		return fmt.Errorf("--starts %d: want at least 1", f.starts)
	case f.plot != "" && plotfile.Check(f.plot) != nil:
		return fmt.Errorf("--plot %w", plotfile.Check(f.plot))
	case !(f.speedup > 0) || math.IsInf(f.speedup, 0):
		return fmt.Errorf("--speedup %g: want a positive factor", f.speedup)
	case !(f.passes > 0) || math.IsInf(f.passes, 0):
		return fmt.Errorf("--passes %g: want a positive count", f.passes)
	case f.marketName == "persecond" && f.preemptions == "":
		return errors.New("--market persecond needs --preemptions: its evictions come from a preemption trace")
	case f.marketName != "persecond" && f.preemptions != "":
		return fmt.Errorf("--preemptions is for --market persecond: in the %s market evictions come from the prices and the bid", f.marketName)
	}
	// The forms of --from and --for are checked before the trace is read
	// (0.6 s for a month of prices); where they fall in it, after.
	if _, err := trace.ParseTime(f.from); f.from != "" && err != nil {
		return fmt.Errorf("--from %q: want a time such as 2015-04-01 or 2015-04-01T12:00:00Z", f.from)
	}
	if d, err := parseSpan(f.span); f.span != "" && (err != nil || d <= 0) {
		return fmt.Errorf("--for %q: want a positive duration such as 720h or 30d", f.span)
	}
	return nil
}

// providerName is --provider where it means something: the per-second
// market's notice.
func (f replayFlags) providerName() string {
	if f.marketName != "persecond" {
		return ""
	}
	return f.provider
}

// config reads the traces and the calibration.
func (f replayFlags) config(note io.Writer) (replay.Config, []string, error) {
	var cfg replay.Config
	model, err := billing.ByName(f.marketName, f.provider)
	if err != nil {
		return cfg, nil, err
	}
	names := []string{f.policy}
	if f.policy == "all" {
		names = policy.Names
	} else if _, err := policy.New(f.policy, policy.Config{}); err != nil {
		return cfg, nil, err
	}
	od, err := trace.ParseOnDemand(f.onDemand)
	if err != nil {
		return cfg, nil, err
	}
	paths, err := fileList("--prices", f.prices)
	if err != nil {
		return cfg, nil, err
	}
	// Every file named is checked before any is read: a missing second
	// trace or calibration was found only after the first trace was
	// read (0.6 s for a month of prices).
	var preempts []string
	if f.marketName == "persecond" {
		if preempts, err = fileList("--preemptions", f.preemptions); err != nil {
			return cfg, nil, err
		}
	}
	if f.calibration != "" {
		if err := readableFile("--calibration", f.calibration); err != nil {
			return cfg, nil, err
		}
	}
	// The calibration and the app in it too: a malformed file or an app
	// it lacks was found after the traces were read.
	cal, err := jobsim.LoadCalibration(f.calibration)
	if err != nil {
		return cfg, nil, err
	}
	// A calibration of processes in compressed time is for --speedup.
	cal = cal.AtSpeedup(f.speedup)
	app, ok := cal.Apps[f.app]
	if !ok || app.UpdatesPerPass <= 0 {
		return cfg, nil, fmt.Errorf("--app %q: the calibration file describes no such app", f.app)
	}
	prices, err := trace.ReadPricesFiles(paths, f.product)
	if err != nil {
		return cfg, nil, fmt.Errorf("--prices: %w", err)
	}
	if len(prices.Continued) == len(paths) {
		fmt.Fprintf(note, "replay: %s has a NextToken: AWS had more to send (the trace may lack its oldest prices); give every page, --prices page1.json,page2.json,...\n", strings.Join(prices.Continued, ", "))
	}
	if err := prices.SetOnDemand(od); err != nil {
		return cfg, nil, err
	}
	var avail []*trace.Availability
	if f.marketName == "persecond" {
		for _, p := range preempts {
			a, err := trace.ReadAvailability(p)
			if err != nil {
				return cfg, nil, fmt.Errorf("--preemptions: %w", err)
			}
			avail = append(avail, a)
		}
		if n := len(prices.Series); len(avail) > n {
			fmt.Fprintf(note, "replay: %d preemption traces for %d markets (assigned in turn): %s not used\n", len(avail), n, strings.Join(preempts[n:], ", "))
		}
	}
	if f.calibration == "" {
		estimateRates(prices, &cal, note)
	}
	if _, ok := findType(prices, cal.ReferenceType); !ok && f.calibration == "" {
		// The default job on a trace of other types: the nearest type
		// in work rate, as many machines as do the same work.
		if typ, ok := nearestType(prices, cal); ok {
			was, n := cal.ReferenceType, cal.Machines
			if cal, err = cal.WithReference(typ); err != nil {
				return cfg, nil, err
			}
			fmt.Fprintf(note, "replay: the trace has no %s, the default job's type: it runs on %s instead, the reference %d of them for %d %s (the nearest work rate; --calibration names another)\n",
				was, typ, cal.Machines, n, was)
		}
	}
	if _, ok := findType(prices, cal.ReferenceType); !ok {
		return cfg, nil, fmt.Errorf("%s: no market of the job's instance type %s (calibration reference_type): give a --calibration file that names one of the trace's types, with its work rate, e.g. {\"reference_type\": \"%s\", \"ecu\": {\"%s\": ECU}}", f.prices, cal.ReferenceType, prices.Series[0].Market.Type, prices.Series[0].Market.Type)
	}
	cfg = replay.Config{Prices: prices, Avail: avail, Model: model, Cal: cal, Updates: f.passes * app.UpdatesPerPass,
		Bid: f.bid, Design: f.design, Estimator: history.NewEstimator(model.Period()), Every: 5 * time.Second, Sample: 10 * time.Minute}
	return cfg, names, nil
}

// estimateRates gives the default calibration a work rate for each type
// of the trace AWS published no ECU for (jobsim.EstimatedECU), and says
// which: a trace of today's types (m5, c5, ...) was refused for want of a
// calibration file, or had those markets left alone by every policy.
func estimateRates(p *trace.Prices, cal *jobsim.Calibration, note io.Writer) {
	var est []string
	for _, s := range p.Series {
		typ := s.Market.Type
		if _, err := cal.Rate(typ); err == nil || slices.Contains(est, typ) {
			continue
		}
		if e, ok := jobsim.EstimatedECU(typ); ok {
			cal.ECU[typ] = e
			est = append(est, typ)
		}
	}
	if len(est) > 0 {
		fmt.Fprintf(note, "replay: no published work rate for %s: estimated from the size in the name at %g ECU a vCPU (the fourth generation's; newer types are faster: --calibration gives measured rates)\n",
			strings.Join(est, ", "), jobsim.ECUPerVCPU)
	}
}

// fileList splits a flag's comma-separated list of files, refusing an
// empty name (a stray comma would otherwise read as the file "").
func fileList(flag, list string) ([]string, error) {
	var paths []string
	for _, p := range strings.Split(list, ",") {
		if p = strings.TrimSpace(p); p == "" {
			return nil, fmt.Errorf("%s %q: an empty file name in the list", flag, list)
		}
		if err := readableFile(flag, p); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// readableFile refuses a file that cannot be opened for reading, or is a
// directory, naming the flag that gave it.
func readableFile(flag, path string) error {
	fh, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	defer fh.Close()
	if st, err := fh.Stat(); err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	} else if st.IsDir() {
		return fmt.Errorf("%s %s: a directory, not a file", flag, path)
	}
	return nil
}

// nearestType is the trace's instance type whose work rate is nearest
// (by ratio) to the calibration's reference type's, the cheaper on
// demand per unit of work between two as near; false if no type of the
// trace has a rate.
func nearestType(p *trace.Prices, cal jobsim.Calibration) (string, bool) {
	ref, err := cal.Rate(cal.ReferenceType)
	if err != nil {
		return "", false
	}
	best, bestDist, bestCost := "", math.Inf(1), math.Inf(1)
	for _, s := range p.Series {
		r, err := cal.Rate(s.Market.Type)
		if err != nil {
			continue
		}
		d, cost := math.Abs(math.Log(r/ref)), s.OnDemand/r
		if d < bestDist-1e-9 || (d < bestDist+1e-9 && cost < bestCost) {
			best, bestDist, bestCost = s.Market.Type, d, cost
		}
	}
	return best, best != ""
}

func findType(p *trace.Prices, typ string) (int, bool) {
	for i, s := range p.Series {
		if s.Market.Type == typ {
			return i, true
		}
	}
	return 0, false
}

// startTimes spreads the starts evenly over [from, from+for), failing on
// a segment outside the trace.
func (f replayFlags) startTimes(p *trace.Prices) ([]time.Time, error) {
	first, last := p.Span()
	// The past a policy sees at the first start: as for a preemption
	// trace, two weeks or half a shorter trace.
	from := first.Add(min(14*24*time.Hour, last.Sub(first)/2))
	if f.from != "" {
		from, _ = trace.ParseTime(f.from) // its form checked by check
	}
	if from.Before(first) || !from.Before(last) {
		return nil, fmt.Errorf("--from %s: outside the trace (%s to %s)", from.Format(time.RFC3339), first.Format(time.RFC3339), last.Format(time.RFC3339))
	}
	span := last.Sub(from)
	if f.span != "" {
		d, _ := parseSpan(f.span) // checked by check
		if from.Add(d).After(last) {
			return nil, fmt.Errorf("--for %s: the segment ends at %s, after the trace (%s)", f.span, from.Add(d).Format(time.RFC3339), last.Format(time.RFC3339))
		}
		span = d
	}
	if most := int64(span / minStartGap); int64(f.starts) > max(most, 1) {
		return nil, fmt.Errorf("--starts %d: over the segment's %v they would be %v apart; at most %d (one a %v: price traces move by the minute, closer starts replay the same prices)",
			f.starts, span.Round(time.Minute), (span / time.Duration(f.starts)).Round(time.Millisecond), max(most, 1), minStartGap)
	}
	starts := make([]time.Time, f.starts)
	for i := range starts {
		starts[i] = from.Add(time.Duration(int64(span) / int64(f.starts) * int64(i)))
	}
	return starts, nil
}

// minStartGap is the closest two starts of a sweep may be.
const minStartGap = time.Minute

// parseSpan reads a Go duration or a number of days ("30d").
func parseSpan(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(d, 64)
		return time.Duration(n * 24 * float64(time.Hour)), err
	}
	return time.ParseDuration(s)
}
