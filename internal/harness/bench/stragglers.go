package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/terrace-ml/terrace/internal/harness/straggle"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// StragglerOptions configure Stragglers.
type StragglerOptions struct {
	// App names the application in the report.
	App string
	// Workers and Servers of each run's cluster (4 and 2 if 0).
	Workers, Servers int
	// Patterns are the --straggle patterns compared (one:4x, random:3x,
	// machine:5x@2s-6s and powerlaw:1.5 if nil).
	Patterns []string
	// Staleness lists SSP's bounds tried; the fastest is SSP's figure and
	// the bound reassignment runs under (2, 16 and 128 if nil).
	Staleness []int
	Seed      uint64
	// Work is each row's emulated compute (straggle.Pacer.WithWork; 100 µs
	// if 0), so that four workers on a 2-core machine straggle as four
	// machines would.
	Work time.Duration
	// Repeats is how many times each run is made, in rounds (1 if 0); a
	// figure is the median run's. The first round's SSP runs choose the
	// bound for the rest.
	Repeats int
	// Job makes the application's worker job under a consistency model.
	Job func(cons table.Consistency) (node.Job, error)
	// Step, when set, hears after each run how many of the total are
	// done (for a progress bar).
	Step func(done, total int)
}

// StragglerRun is one training run.
type StragglerRun struct {
	Consistency        string             `json:"consistency"`
	Straggle           string             `json:"straggle"`
	Reassign           bool               `json:"reassign"`
	Seconds            float64            `json:"seconds"`
	Metrics            map[string]float64 `json:"metrics"`
	Reassignments      int64              `json:"reassignments"`
	ExamplesReassigned int64              `json:"examples_reassigned"`
	SplitsRefused      int64              `json:"splits_refused"`
	SplitSeconds       float64            `json:"split_seconds"`
	// Trace is each worker's progress (rows trained) over time.
	Trace []straggle.Point `json:"-"`
}

// PatternResult compares one pattern's runs with the jitter-free ideal
// measured next to them.
type PatternResult struct {
	BSPOverIdeal float64 `json:"bsp_over_ideal"`
	SSPOverIdeal float64 `json:"ssp_over_ideal"`
	RROverIdeal  float64 `json:"rr_over_ideal"`
	// Bound is the least ratio any schedule can reach (straggle.Bound).
	Bound float64 `json:"bound"`
	// BestStaleness is SSP's fastest bound, which Ideal and RR use too.
	BestStaleness int             `json:"best_staleness"`
	Ideal         *StragglerRun   `json:"ideal"`
	BSP           *StragglerRun   `json:"bsp"`
	SSP           []*StragglerRun `json:"ssp"`
	RR            *StragglerRun   `json:"rr"`
}

// StragglerReport is `terrace bench stragglers`'s report.
type StragglerReport struct {
	App      string                    `json:"app"`
	Workers  int                       `json:"workers"`
	Work     string                    `json:"work_per_example"`
	Seed     uint64                    `json:"seed"`
	Patterns map[string]*PatternResult `json:"patterns"`
}

// Stragglers trains o.Job under each pattern with BSP, SSP at each
// bound, and SSP's best bound with rapid reassignment, and divides each
// runtime by the jitter-free run's under that bound, measured in the same
// invocation (docs/design/stragglers.md).
func Stragglers(ctx context.Context, o StragglerOptions, log io.Writer) (*StragglerReport, error) {
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.Servers <= 0 {
		o.Servers = 2
	}
	if o.Patterns == nil {
		o.Patterns = []string{"one:4x", "random:3x", "machine:5x@2s-6s", "powerlaw:1.5"}
	}
	if o.Staleness == nil {
		o.Staleness = []int{2, 16, 128}
	}
	if o.Work <= 0 {
		o.Work = 100 * time.Microsecond
	}
	rep := &StragglerReport{App: o.App, Workers: o.Workers, Work: o.Work.String(), Seed: o.Seed, Patterns: map[string]*PatternResult{}}
	done, total := 0, len(o.Patterns)*max(o.Repeats, 1)*(len(o.Staleness)+3)
	step := func() {
		done++
		if o.Step != nil {
			o.Step(done, total)
		}
	}
	for _, name := range o.Patterns {
		p, err := straggle.Parse(name)
		if err != nil {
			return nil, err
		}
		res := &PatternResult{}
		var ssp [][]*StragglerRun // by bound
		var ideals, bsp, rr []*StragglerRun
		for round := range max(o.Repeats, 1) {
			for i, s := range o.Staleness {
				r, err := o.run(ctx, table.Consistency{Model: table.SSP, Staleness: s}, p, false, log)
				if err != nil {
					return nil, err
				}
				step()
				if round == 0 {
					ssp = append(ssp, nil)
				}
				ssp[i] = append(ssp[i], r)
			}
			if round == 0 {
				best := 0
				for i := range ssp {
					if ssp[i][0].Seconds < ssp[best][0].Seconds {
						best = i
					}
				}
				res.BestStaleness = o.Staleness[best]
			}
			bound := table.Consistency{Model: table.SSP, Staleness: res.BestStaleness}
			for _, r := range []struct {
				runs     *[]*StragglerRun
				cons     table.Consistency
				p        straggle.Pattern
				reassign bool
			}{{&ideals, bound, straggle.Pattern{}, false}, {&bsp, table.Consistency{Model: table.BSP}, p, false}, {&rr, bound, p, true}} {
				run, err := o.run(ctx, r.cons, r.p, r.reassign, log)
				if err != nil {
					return nil, err
				}
				step()
				*r.runs = append(*r.runs, run)
			}
		}
		for i := range ssp {
			res.SSP = append(res.SSP, medianRun(ssp[i]))
		}
		best := res.SSP[slices.Index(o.Staleness, res.BestStaleness)]
		res.Ideal, res.BSP, res.RR = medianRun(ideals), medianRun(bsp), medianRun(rr)
		ideal := res.Ideal.Seconds
		res.BSPOverIdeal, res.SSPOverIdeal, res.RROverIdeal = res.BSP.Seconds/ideal, best.Seconds/ideal, res.RR.Seconds/ideal
		res.Bound = straggle.Bound(p, o.Workers, time.Duration(ideal*float64(time.Second)))
		rep.Patterns[name] = res
		fmt.Fprintf(log, "bench stragglers: %s %s: bsp %.2fx, ssp(%d) %.2fx, rr %.2fx of the ideal %.2fs; no schedule below %.2fx\n",
			o.App, name, res.BSPOverIdeal, res.BestStaleness, res.SSPOverIdeal, res.RROverIdeal, ideal, res.Bound)
	}
	return rep, nil
}

// median is the run of median time (the lower of the middle two).
func medianRun(runs []*StragglerRun) *StragglerRun {
	rs := slices.Clone(runs)
	slices.SortFunc(rs, func(a, b *StragglerRun) int { return cmp.Compare(a.Seconds, b.Seconds) })
	return rs[(len(rs)-1)/2]
}

// run trains once on a cluster of its own.
func (o StragglerOptions) run(ctx context.Context, cons table.Consistency, p straggle.Pattern, reassign bool, log io.Writer) (*StragglerRun, error) {
	job, err := o.Job(cons)
	if err != nil {
		return nil, err
	}
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: o.Servers, Workers: o.Workers, Replication: 1})
	if err != nil {
		return nil, err
	}
	defer l.Close()
	run := &straggle.Run{}
	start := time.Now()
	job = straggle.Job(job, straggle.Options{Pattern: p, Seed: o.Seed, Reassign: reassign, Hub: ps.NewPeerHub(), Start: start, Work: o.Work}, run)
	reps, err := l.RunWorkers(ctx, job)
	if err != nil {
		return nil, fmt.Errorf("bench stragglers: %s %s: %w", cons, p, err)
	}
	r := &StragglerRun{Consistency: cons.String(), Straggle: p.String(), Reassign: reassign, Seconds: time.Since(start).Seconds(), Trace: run.Trace()}
	st := run.Stats()
	r.Reassignments, r.ExamplesReassigned, r.SplitsRefused, r.SplitSeconds = st.Reassignments, st.ExamplesReassigned, st.Refused, st.SplitSeconds
	r.Metrics = testMetrics(reps[0])
	fmt.Fprintf(log, "bench stragglers: %s %s reassign=%v: %.2fs%s; %d reassignments (%d rows), %d refused, %.2fs in splits\n",
		cons, p, reassign, r.Seconds, metricWords(r.Metrics), r.Reassignments, r.ExamplesReassigned, r.SplitsRefused, r.SplitSeconds)
	return r, nil
}

// metricWords prints metrics as " name value" pairs in name order (a Go
// map printed as such read "map[test_accuracy:0.849...]").
func metricWords(m map[string]float64) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, " %s %.4f", k, m[k])
	}
	return b.String()
}

// testMetrics are the test_* numbers of a worker's report.
func testMetrics(raw json.RawMessage) map[string]float64 {
	var all map[string]any
	if json.Unmarshal(raw, &all) != nil {
		return nil
	}
	m := map[string]float64{}
	for k, v := range all {
		if f, ok := v.(float64); ok && strings.HasPrefix(k, "test_") {
			m[k] = f
		}
	}
	return m
}
