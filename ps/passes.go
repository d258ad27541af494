package ps

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
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
// p.Eval, evaluated; each pass's examples account (account.go) goes with
// its evaluation.
func (c *Client) RunPasses(ctx context.Context, p Passes) error {
	// The examples account rides on the evaluations (one live worker
	// takes each pass's, whatever dies): a job without an evaluation of
	// its own still has each pass "evaluated", with no metrics, for its
	// account. orders keeps each pass's Order for the account, by pass
	// as it runs (a slice of p.N made at the start ran out of memory at
	// --passes 99999999999).
	var account accountFunc
	orders := map[int]func(pass, partition int) []int{}
	if c.keepAccount(ctx) {
		account = func(ctx context.Context, pass int) (*api.ExamplesAccount, error) {
			order := orders[pass-1]
			if order == nil {
				return nil, nil // not a pass this worker ran
			}
			return c.accountPass(ctx, pass-1, func(part int) int { return len(order(pass-1, part)) })
		}
	}
	eval := p.Eval
	if eval == nil && account != nil {
		eval = func(int) EvalFunc { return noMetrics }
	}
	var secs float64
	record := func(res []PassResult, err error) error {
		if p.Result != nil && p.Eval != nil {
			for _, r := range res {
				p.Result(r, secs)
			}
		}
		return err
	}
	for {
		err := c.runPasses(ctx, p, orders, eval, account, &secs, record)
		if !errors.Is(err, api.ErrRewound) {
			return err
		}
		// The cluster went back to a checkpoint (coordinator
		// --on-copies-lost resume): the passes start again from the
		// first, as a worker joining a resumed job's do; those the
		// checkpoint holds are done at once, and evaluated already.
		c.log.Warn("the cluster went back to a checkpoint: this worker's lease is dropped and its passes start again from the checkpoint's", "err", err)
	}
}

// runPasses runs p's passes once, until the end or an error.
func (c *Client) runPasses(ctx context.Context, p Passes, orders map[int]func(pass, partition int) []int, eval func(int) EvalFunc,
	account accountFunc, secs *float64, record func([]PassResult, error) error) error {
	for pass := range p.N {
		start := time.Now()
		loop := p.Loop(pass)
		orders[pass] = loop.Order
		if err := c.EachPartition(ctx, pass, loop); err != nil {
			return fmt.Errorf("pass %d: %w", pass+1, err)
		}
		if p.Trained != nil {
			if err := p.Trained(ctx, pass); err != nil {
				return err
			}
		}
		if eval == nil {
			continue
		}
		*secs = time.Since(start).Seconds()
		if err := record(c.evaluatePass(ctx, pass+1, eval(pass), account)); err != nil {
			return err
		}
	}
	if eval == nil || p.N == 0 {
		return nil
	}
	// The last pass's evaluation may have been handed to a worker that
	// died: wait for it, or take it.
	return record(c.finishEvaluations(ctx, p.N, eval(p.N-1), account))
}

// noMetrics is the evaluation of a job that has none: its results carry
// only the examples account.
func noMetrics(context.Context) (map[string]float64, error) { return nil, nil }

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
