package ps

import (
	"context"
	"fmt"
	"time"
)

// Passes is a job's passes as one worker trains them: each pass's loop,
// and after it the evaluation that belongs to the job rather than to a
// rank (EvaluatePass), the last one waited for or taken over
// (FinishEvaluations). Every app runs its passes through it.
type Passes struct {
	// N is the number of passes.
	N int
	// Loop returns pass's loop (passes count from 0); it is called as the
	// pass starts, so an app may reset its per-pass figures there.
	Loop func(pass int) Loop
	// Trained, when set, is called once the pass is trained (every
	// partition, by whichever worker), before it is evaluated.
	Trained func(ctx context.Context, pass int) error
	// Eval, when set, returns the evaluation of the model after pass;
	// with Eval nil no pass is evaluated.
	Eval func(pass int) EvalFunc
	// Result, when set, is called with each evaluation's result as this
	// worker learns of it, and how long this worker's latest pass took.
	Result func(r PassResult, seconds float64)
}

// RunPasses trains p.N passes and returns once each is trained and, with
// p.Eval, evaluated.
func (c *Client) RunPasses(ctx context.Context, p Passes) error {
	var secs float64
	record := func(res []PassResult, err error) error {
		if p.Result != nil {
			for _, r := range res {
				p.Result(r, secs)
			}
		}
		return err
	}
	for pass := range p.N {
		start := time.Now()
		if err := c.EachPartition(ctx, pass, p.Loop(pass)); err != nil {
			return fmt.Errorf("pass %d: %w", pass+1, err)
		}
		if p.Trained != nil {
			if err := p.Trained(ctx, pass); err != nil {
				return err
			}
		}
		if p.Eval == nil {
			continue
		}
		secs = time.Since(start).Seconds()
		if err := record(c.EvaluatePass(ctx, pass+1, p.Eval(pass))); err != nil {
			return err
		}
	}
	if p.Eval == nil || p.N == 0 {
		return nil
	}
	// The last pass's evaluation may have been handed to a worker that
	// died: wait for it, or take it.
	return record(c.FinishEvaluations(ctx, p.N, p.Eval(p.N-1)))
}

// Collect returns a Passes.Result that appends each result, made into an
// app's own figures by conv, to *out, and hands it to progress (if not
// nil).
func Collect[S any](out *[]S, conv func(r PassResult, seconds float64) S, progress func(S)) func(PassResult, float64) {
	return func(r PassResult, seconds float64) {
		s := conv(r, seconds)
		*out = append(*out, s)
		if progress != nil {
			progress(s)
		}
	}
}
