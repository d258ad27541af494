package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the JSON report of a replay.
type Report struct {
	Market string `json:"market"`
	// Provider is the per-second market's cloud (its notice), and
	// Preemptions its traces, as given.
	Provider    string      `json:"provider,omitempty"`
	Prices      string      `json:"prices"`
	Preemptions string      `json:"preemptions,omitempty"`
	App         string      `json:"app"`
	Passes      float64     `json:"passes"`
	Updates     float64     `json:"updates"`
	Starts      []time.Time `json:"starts"`
	Simulated   bool        `json:"simulated"`
	// Policies holds each policy's figures: the run's with one start, the
	// medians over the runs with several.
	Policies map[string]Result `json:"policies"`
	// BidBrainVsOnDemand and BidBrainVsCheckpoint are dollar ratios for
	// the same work (medians over the runs with several starts).
	BidBrainVsOnDemand   *float64 `json:"bidbrain_vs_ondemand,omitempty"`
	BidBrainVsCheckpoint *float64 `json:"bidbrain_vs_checkpoint,omitempty"`
	// BidBrainHoursVsOnDemand is the runtime ratio for the same work.
	BidBrainHoursVsOnDemand *float64 `json:"bidbrain_hours_vs_ondemand,omitempty"`
	// Runs are each start's figures, with the ratios' medians and worst.
	Runs                       []StartRun `json:"runs,omitempty"`
	BidBrainVsOnDemandMedian   *float64   `json:"bidbrain_vs_ondemand_median,omitempty"`
	BidBrainVsOnDemandWorst    *float64   `json:"bidbrain_vs_ondemand_worst,omitempty"`
	BidBrainVsCheckpointMedian *float64   `json:"bidbrain_vs_checkpoint_median,omitempty"`
	BidBrainVsCheckpointWorst  *float64   `json:"bidbrain_vs_checkpoint_worst,omitempty"`
	BidBrainHoursMedian        *float64   `json:"bidbrain_hours_vs_ondemand_median,omitempty"`
	BidBrainHoursWorst         *float64   `json:"bidbrain_hours_vs_ondemand_worst,omitempty"`
	// PreemptionsAt is where a single start sat in each preemption trace
	// (with several starts, each run's Preemptions says).
	PreemptionsAt []Position `json:"preemptions_at,omitempty"`
	// ExpectedHours is the job's expected duration a sweep spread its
	// starts over the preemption traces for (SpreadMargin times the first
	// start's on-demand hours), and NotSpread the traces too short for it,
	// where every start sat at the trace's Lead.
	ExpectedHours float64  `json:"expected_hours,omitempty"`
	NotSpread     []string `json:"preemptions_not_spread,omitempty"`
	// Unfinished counts, by policy, the starts whose run the trace ended
	// before the job did: left out of the medians and ratios.
	Unfinished     map[string]int `json:"unfinished_runs,omitempty"`
	ElapsedSeconds float64        `json:"elapsed_seconds"`
	Calibration    any            `json:"calibration"`
	// Timelines are the first start's runs, for the plot.
	Timelines map[string][]Sample `json:"-"`
}

// StartRun is one start's figures.
type StartRun struct {
	Start                time.Time         `json:"start"`
	Policies             map[string]Result `json:"policies"`
	BidBrainVsOnDemand   *float64          `json:"bidbrain_vs_ondemand,omitempty"`
	BidBrainVsCheckpoint *float64          `json:"bidbrain_vs_checkpoint,omitempty"`
	BidBrainHours        *float64          `json:"bidbrain_hours_vs_ondemand,omitempty"`
	// Preemptions is where the start sat in each preemption trace in use.
	Preemptions []Position `json:"preemptions,omitempty"`
}

// Position is where a run's start sat in one preemption trace: AtHours
// of its LengthHours were past, as the past the policy saw.
type Position struct {
	Trace       string  `json:"trace"`
	AtHours     float64 `json:"at_hours"`
	LengthHours float64 `json:"length_hours"`
}

// PositionList is ps for a line of the terminal.
func PositionList(ps []Position) string {
	var at []string
	for _, p := range ps {
		at = append(at, p.String())
	}
	return strings.Join(at, ", ")
}

func (p Position) String() string {
	return fmt.Sprintf("%.1f h of %s's %.1f", p.AtHours, filepath.Base(p.Trace), p.LengthHours)
}

// Positions are where a run of c starts in each preemption trace in use
// (the first min(traces, markets)).
func (c Config) Positions() []Position {
	var ps []Position
	for i := 0; i < min(len(c.Avail), len(c.Prices.Series)); i++ {
		ps = append(ps, Position{Trace: c.Avail[i].Source, AtHours: c.at(i).Hours(), LengthHours: c.Avail[i].End.Hours()})
	}
	return ps
}

// spread sets c.At for the i-th of the sweep's starts (Spread), over the
// expected duration d; at the second start it says once which traces are
// too short to move in.
func (rep *Report) spread(c *Config, i int, d time.Duration) {
	if i == 0 || len(c.Avail) == 0 {
		return
	}
	at, kept := c.Spread(i, len(rep.Starts), d)
	c.At = at
	if i > 1 {
		return
	}
	rep.ExpectedHours = d.Hours()
	for _, k := range kept {
		if k >= len(c.Prices.Series) {
			continue
		}
		a := c.Avail[k]
		rep.NotSpread = append(rep.NotSpread, a.Source)
		if c.Progress == nil {
			continue
		}
		why := fmt.Sprintf("it holds %.1f h after the %.1f h its policies see as the past, less than the job's expected %.1f h (%g times on-demand's)", (a.End - Lead(a)).Hours(), Lead(a).Hours(), d.Hours(), float64(SpreadMargin))
		if d <= 0 {
			why = "the on-demand reference did not finish from the first start, so the job's duration is unknown"
		}
		fmt.Fprintf(c.Progress, "replay: every start sits at the same place in the preemption trace %s, %.1f h in: %s\n", a.Source, Lead(a).Hours(), why)
	}
}

// Sweep runs every policy from every start. The on-demand reference is
// always run, for every policy's ondemand_dollars.
func Sweep(ctx context.Context, cfg Config, policies []string, starts []time.Time) (*Report, error) {
	began := time.Now()
	rep := &Report{Starts: starts, Policies: map[string]Result{}, Timelines: map[string][]Sample{}}
	names := policies
	if !contains(names, "ondemand") {
		names = append([]string{"ondemand"}, names...)
	}
	// expected is the job's duration the starts are spread over the
	// preemption traces for, from the first start's on-demand run (whose
	// machines are in no preemption trace).
	var expected time.Duration
	for i, start := range starts {
		c := cfg
		rep.spread(&c, i, expected)
		run := StartRun{Start: start, Policies: map[string]Result{}, Preemptions: c.Positions()}
		if i > 0 {
			c.Sample = 0
		}
		if c.Progress != nil && len(run.Preemptions) > 0 {
			fmt.Fprintf(c.Progress, "replay: start %d/%d %s sits in the preemption traces at %s\n", i+1, len(starts), start.Format(time.RFC3339), PositionList(run.Preemptions))
		}
		for j, name := range names {
			k := float64(i*len(names) + j)
			if cfg.Advance != nil {
				c.fraction = func(f float64) { cfg.Advance(k+f, len(starts)*len(names)) }
			}
			res, err := Run(ctx, c, name, start)
			// One start the trace ends too early for does not end a
			// sweep: its run is kept as unfinished, and the others go on.
			if err != nil && !(len(starts) > 1 && errors.Is(err, ErrTraceEnded)) {
				return nil, err
			}
			if i == 0 && cfg.Sample > 0 {
				rep.Timelines[name] = res.Timeline
			}
			run.Policies[name] = res
			if cfg.Progress != nil {
				unfinished := ""
				if res.Unfinished {
					unfinished = fmt.Sprintf(" (the trace ended at %.0f%% of the work: left out of the medians)", 100*res.DoneShare)
				}
				fmt.Fprintf(cfg.Progress, "replay: start %d/%d %s: %s $%.2f in %.1f h, %d evictions%s\n",
					i+1, len(starts), start.Format(time.RFC3339), name, res.Dollars, res.Hours, res.Evictions, unfinished)
			}
			if cfg.Advance != nil {
				cfg.Advance(k+1, len(starts)*len(names))
			}
		}
		if od := run.Policies["ondemand"]; !od.Unfinished {
			if i == 0 {
				expected = time.Duration(SpreadMargin * od.Hours * float64(time.Hour))
			}
			for name, res := range run.Policies {
				res.OnDemandDollars = od.Dollars
				run.Policies[name] = res
			}
		}
		run.BidBrainVsOnDemand = ratio(run.Policies, "bidbrain", "ondemand")
		run.BidBrainVsCheckpoint = ratio(run.Policies, "bidbrain", "checkpoint")
		run.BidBrainHours = hoursRatio(run.Policies, "bidbrain", "ondemand")
		if !contains(policies, "ondemand") {
			delete(run.Policies, "ondemand")
		}
		rep.Runs = append(rep.Runs, run)
	}
	rep.summarise(policies)
	rep.ElapsedSeconds = time.Since(began).Seconds()
	return rep, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// ratio is a's dollars over b's for the same work: none if either run
// is unfinished.
func ratio(p map[string]Result, a, b string) *float64 {
	ra, okA := p[a]
	rb, okB := p[b]
	if !okA || !okB || rb.Dollars == 0 || ra.Unfinished || rb.Unfinished {
		return nil
	}
	v := ra.Dollars / rb.Dollars
	return &v
}

func hoursRatio(p map[string]Result, a, b string) *float64 {
	ra, okA := p[a]
	rb, okB := p[b]
	if !okA || !okB || rb.Hours == 0 || ra.Unfinished || rb.Unfinished {
		return nil
	}
	v := ra.Hours / rb.Hours
	return &v
}

// summarise fills the per-policy figures (medians over the runs) and the
// ratios' medians and worst.
func (rep *Report) summarise(policies []string) {
	for _, name := range policies {
		var rs []Result
		for _, r := range rep.Runs {
			if res := r.Policies[name]; !res.Unfinished {
				rs = append(rs, res)
			} else {
				if rep.Unfinished == nil {
					rep.Unfinished = map[string]int{}
				}
				rep.Unfinished[name]++
			}
		}
		rep.Policies[name] = medianResult(rs)
	}
	var vsOD, vsCk, hours []float64
	for _, r := range rep.Runs {
		if r.BidBrainVsOnDemand != nil {
			vsOD = append(vsOD, *r.BidBrainVsOnDemand)
		}
		if r.BidBrainVsCheckpoint != nil {
			vsCk = append(vsCk, *r.BidBrainVsCheckpoint)
		}
		if r.BidBrainHours != nil {
			hours = append(hours, *r.BidBrainHours)
		}
	}
	rep.BidBrainVsOnDemand, rep.BidBrainVsCheckpoint, rep.BidBrainHoursVsOnDemand = median(vsOD), median(vsCk), median(hours)
	if len(rep.Runs) > 1 {
		rep.BidBrainVsOnDemandMedian, rep.BidBrainVsOnDemandWorst = median(vsOD), worst(vsOD)
		rep.BidBrainVsCheckpointMedian, rep.BidBrainVsCheckpointWorst = median(vsCk), worst(vsCk)
		rep.BidBrainHoursMedian, rep.BidBrainHoursWorst = median(hours), worst(hours)
	} else {
		if len(rep.Runs) == 1 {
			rep.PreemptionsAt = rep.Runs[0].Preemptions
		}
		rep.Runs = nil
	}
}

func median(xs []float64) *float64 {
	if len(xs) == 0 {
		return nil
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return &m
}

func worst(xs []float64) *float64 {
	if len(xs) == 0 {
		return nil
	}
	w := math.Inf(-1)
	for _, x := range xs {
		w = max(w, x)
	}
	return &w
}

// medianResult is the median of each figure over rs; a run with none
// finished is unfinished.
func medianResult(rs []Result) Result {
	if len(rs) == 0 {
		return Result{Unfinished: true}
	}
	pick := func(f func(Result) float64) float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		return *median(xs)
	}
	return Result{
		Dollars:         pick(func(r Result) float64 { return r.Dollars }),
		OnDemandDollars: pick(func(r Result) float64 { return r.OnDemandDollars }),
		Hours:           pick(func(r Result) float64 { return r.Hours }),
		Evictions:       int(math.Round(pick(func(r Result) float64 { return float64(r.Evictions) }))),
		Acquisitions:    int(math.Round(pick(func(r Result) float64 { return float64(r.Acquisitions) }))),
		StageSwitches:   int(math.Round(pick(func(r Result) float64 { return float64(r.StageSwitches) }))),
		UpdatesLost:     pick(func(r Result) float64 { return r.UpdatesLost }),
		FreeShare:       pick(func(r Result) float64 { return r.FreeShare }),
		DoneShare:       1,
		Design:          designs(rs),
	}
}

// designs names the design the runs used, or each design with its count
// of runs ("elastic 15, tiers 5") when they differ.
func designs(rs []Result) string {
	n := map[string]int{}
	for _, r := range rs {
		n[r.Design]++
	}
	if len(n) == 1 {
		return rs[0].Design
	}
	names := slices.Sorted(maps.Keys(n))
	parts := make([]string, len(names))
	for i, d := range names {
		parts[i] = fmt.Sprintf("%s %d", d, n[d])
	}
	return strings.Join(parts, ", ")
}

// Summary writes the one-screen table comparing the policies.
func (rep *Report) Summary(w io.Writer, policies []string) {
	what := "one start"
	if len(rep.Starts) > 1 {
		what = fmt.Sprintf("medians over %d starts", len(rep.Starts))
	}
	fmt.Fprintf(w, "%s market, %.3g updates, %s\n", rep.Market, rep.Updates, what)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tdollars\tvs on-demand\thours\tevictions\tacquisitions\tstage switches\tupdates lost\tfree compute\tdesign\t")
	for _, name := range policies {
		r := rep.Policies[name]
		if r.Unfinished {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t\n", name)
			continue
		}
		vs := "-"
		if r.OnDemandDollars > 0 {
			vs = fmt.Sprintf("%.1f%%", 100*r.Dollars/r.OnDemandDollars)
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%s\t%.1f\t%d\t%d\t%d\t%.0f\t%.0f%%\t%s\t\n", name, r.Dollars, vs, r.Hours, r.Evictions, r.Acquisitions, r.StageSwitches, r.UpdatesLost, 100*r.FreeShare, r.Design)
	}
	tw.Flush()
	line := func(label string, med, worst *float64) {
		if med == nil {
			return
		}
		s := fmt.Sprintf("%s: %.3f", label, *med)
		if worst != nil {
			s = fmt.Sprintf("%s: median %.3f, worst %.3f", label, *med, *worst)
		}
		fmt.Fprintln(w, s)
	}
	if len(rep.Runs) > 1 {
		line("bidbrain/ondemand dollars", rep.BidBrainVsOnDemandMedian, rep.BidBrainVsOnDemandWorst)
		line("bidbrain/checkpoint dollars", rep.BidBrainVsCheckpointMedian, rep.BidBrainVsCheckpointWorst)
		line("bidbrain/ondemand hours", rep.BidBrainHoursMedian, rep.BidBrainHoursWorst)
	} else {
		line("bidbrain/ondemand dollars", rep.BidBrainVsOnDemand, nil)
		line("bidbrain/checkpoint dollars", rep.BidBrainVsCheckpoint, nil)
		line("bidbrain/ondemand hours", rep.BidBrainHoursVsOnDemand, nil)
	}
	for _, name := range policies {
		if n := rep.Unfinished[name]; n > 0 {
			fmt.Fprintf(w, "%s: %d of %d starts ended with the trace before the job did (left out of the medians and ratios)\n", name, n, len(rep.Runs))
		}
	}
	fmt.Fprintf(w, "%s\n", strings.Repeat("-", 20))
}
