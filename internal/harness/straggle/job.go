package straggle

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
)

// Options say how Job slows and helps the workers of one run.
type Options struct {
	Pattern Pattern
	Seed    uint64
	// Reassign turns on rapid reassignment among the run's workers, which
	// talk through Hub.
	Reassign bool
	Hub      *ps.PeerHub
	// Start is when training starts, for Machine's window and the trace.
	Start time.Time
	// Work is emulated compute per row (Pacer.WithWork); 0 for none.
	Work time.Duration
}

// Run collects what the workers of one run did: reassignment counts and
// the progress trace.
type Run struct {
	mu    sync.Mutex
	stats ps.ReassignStats
	trace []Point
}

// Point is one minibatch boundary of one worker: the rows it had trained
// by Seconds after the start.
type Point struct {
	Rank    int     `json:"rank"`
	Seconds float64 `json:"seconds"`
	Rows    int64   `json:"rows"`
}

// Stats returns the reassignment counts of the run's finished workers.
func (r *Run) Stats() ps.ReassignStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Trace returns the progress points recorded so far.
func (r *Run) Trace() []Point {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Point(nil), r.trace...)
}

// Job runs job on a worker slowed by o.Pattern, with reassignment if
// o.Reassign, recording into run.
func Job(job node.Job, o Options, run *Run) node.Job {
	if o.Start.IsZero() {
		o.Start = time.Now()
	}
	return func(ctx context.Context, c *ps.Client) (any, error) {
		c.Pace(&tracer{Pacer: NewPacer(o.Pattern, o.Seed, c, o.Start).WithWork(o.Work), run: run, rank: c.Rank(), start: o.Start})
		if o.Reassign {
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			if err := c.Reassign(rctx, ps.Reassign{Peers: o.Hub.Peers(c.Rank())}); err != nil {
				return nil, err
			}
		}
		rep, err := job(ctx, c)
		s := c.ReassignStats()
		run.mu.Lock()
		run.stats.Reassignments += s.Reassignments
		run.stats.ExamplesReassigned += s.ExamplesReassigned
		run.stats.Refused += s.Refused
		run.stats.SplitSeconds += s.SplitSeconds
		run.mu.Unlock()
		return rep, err
	}
}

// tracer paces and records each minibatch.
type tracer struct {
	*Pacer
	run   *Run
	rank  int
	start time.Time
	rows  int64
}

func (t *tracer) Pace(ctx context.Context, b ps.Batch, took time.Duration) error {
	err := t.Pacer.Pace(ctx, b, took)
	t.rows += int64(len(b.Rows))
	t.run.mu.Lock()
	t.run.trace = append(t.run.trace, Point{Rank: t.rank, Seconds: time.Since(t.start).Seconds(), Rows: t.rows})
	t.run.mu.Unlock()
	return err
}

// Bound is the least runtime, as a multiple of the jitter-free ideal,
// that any schedule can reach under p with workers workers, whose ideal
// runtime is ideal (docs/design/stragglers.md): the work the pattern adds
// over the compute the cluster keeps.
func Bound(p Pattern, workers int, ideal time.Duration) float64 {
	w := float64(workers)
	switch p.Kind {
	case One:
		return w / (w - 1 + 1/p.Factor)
	case Random:
		return (w - 1 + p.Factor) / w
	case Machine:
		// The victim loses (1 − 1/x) of the part of the window that the
		// run, T long, reaches, and the others absorb it: T = T0 +
		// (min(T, To) − From)·(1 − 1/x)/W, solved by iteration (the map
		// is a contraction: its slope is below 1/W).
		t0, t := ideal.Seconds(), ideal.Seconds()
		for range 100 {
			span := max(0, min(t, p.To.Seconds())-p.From.Seconds())
			t = t0 + span*(1-1/p.Factor)/w
		}
		return t / t0
	case PowerLaw:
		// E[min(f, cap)] for a Pareto law of index a and minimum 1.
		a, c := p.Alpha, float64(PowerLawCap)
		if a == 1 {
			return 1 + math.Log(c)
		}
		return 1 + (1-math.Pow(c, 1-a))/(a-1)
	}
	return 1
}
