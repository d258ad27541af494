package ps

import (
	"context"
	"fmt"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// Evaluations is the optional capability of a Control that hands out the
// job's evaluations (api.Client has it): one live worker evaluates each
// pass, whatever rank dies or drains.
type Evaluations interface {
	ClaimEval(ctx context.Context, rank, pass int) (api.EvalGrant, error)
	EvalResult(ctx context.Context, r api.PassResult) error
}

// EvalFunc scores the model as the servers hold it now, and returns
// metrics by name.
type EvalFunc func(ctx context.Context) (map[string]float64, error)

// EvaluatePass evaluates the model after pass (counted from 1) if the
// coordinator hands that evaluation to this worker, and every earlier
// pass's that is due again (its worker died, drained, or its coordinator
// failed over); those are marked late. It records each result with the
// coordinator and returns them. Every worker calls it after every pass:
// the first to ask gets the pass. A Control without the capability makes
// rank 0 the evaluator.
func (c *Client) EvaluatePass(ctx context.Context, pass int, eval EvalFunc) ([]api.PassResult, error) {
	return c.evaluatePass(ctx, pass, eval, nil)
}

// An accountFunc reads the examples account of pass (counted from 1);
// nil, or a nil account, when none is kept.
type accountFunc func(ctx context.Context, pass int) (*api.ExamplesAccount, error)

// evaluatePass is EvaluatePass, adding to each result its pass's examples
// account.
func (c *Client) evaluatePass(ctx context.Context, pass int, eval EvalFunc, account accountFunc) ([]api.PassResult, error) {
	ev, ok := c.ctl.(Evaluations)
	if !ok {
		if c.Rank() != 0 {
			return nil, nil
		}
		r, err := runEval(ctx, c.Rank(), pass, eval)
		if err != nil {
			return nil, err
		}
		if err := addAccount(ctx, &r, account); err != nil {
			return nil, err
		}
		return []api.PassResult{r}, nil
	}
	g, err := ev.ClaimEval(ctx, c.Rank(), pass)
	if err != nil {
		return nil, fmt.Errorf("ps: %w", err)
	}
	return c.runEvals(ctx, ev, pass, g.Passes, eval, account)
}

func (c *Client) runEvals(ctx context.Context, ev Evaluations, pass int, passes []int, eval EvalFunc, account accountFunc) ([]api.PassResult, error) {
	var out []api.PassResult
	for _, p := range passes {
		r, err := runEval(ctx, c.Rank(), p, eval)
		if err != nil {
			return out, err
		}
		if err := addAccount(ctx, &r, account); err != nil {
			return out, err
		}
		r.Late = p != pass
		if err := ev.EvalResult(ctx, r); err != nil {
			return out, fmt.Errorf("ps: recording the evaluation of pass %d: %w", p, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func runEval(ctx context.Context, rank, pass int, eval EvalFunc) (api.PassResult, error) {
	start := time.Now()
	m, err := eval(ctx)
	if err != nil {
		return api.PassResult{}, fmt.Errorf("evaluating pass %d: %w", pass, err)
	}
	return api.PassResult{Pass: pass, Rank: rank, Seconds: time.Since(start).Seconds(), Metrics: m}, nil
}

// addAccount adds r's pass's examples account to r.
func addAccount(ctx context.Context, r *api.PassResult, account accountFunc) error {
	if account == nil {
		return nil
	}
	a, err := account(ctx, r.Pass)
	if err != nil {
		return err
	}
	r.Examples = a
	return nil
}

// evalPoll is how often a worker at the job's end asks again for
// evaluations that another worker holds.
const evalPoll = 200 * time.Millisecond

// FinishEvaluations, after the last pass, waits until every pass up to
// last is evaluated, taking any evaluation whose holder dies or drains
// meanwhile (the failure timeout makes it due again): the job's last
// figures do not die with a worker. Without the capability it returns
// at once.
func (c *Client) FinishEvaluations(ctx context.Context, last int, eval EvalFunc) ([]api.PassResult, error) {
	return c.finishEvaluations(ctx, last, eval, nil)
}

func (c *Client) finishEvaluations(ctx context.Context, last int, eval EvalFunc, account accountFunc) ([]api.PassResult, error) {
	ev, ok := c.ctl.(Evaluations)
	if !ok {
		return nil, nil
	}
	var out []api.PassResult
	for {
		g, err := ev.ClaimEval(ctx, c.Rank(), last)
		if err != nil {
			return out, fmt.Errorf("ps: %w", err)
		}
		res, err := c.runEvals(ctx, ev, last, g.Passes, eval, account)
		out = append(out, res...)
		if err != nil || len(g.Pending) == 0 {
			return out, err
		}
		select {
		case <-time.After(evalPoll):
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
}

// PassResult is the evaluation of the model after one pass, as the
// coordinator keeps it.
type PassResult = api.PassResult
