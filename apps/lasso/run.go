package lasso

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// Run fits the Lasso on cfg.Train with this worker's leases of coordinate
// blocks, and evaluates after every pass the job hands it the evaluation
// of.
func Run(ctx context.Context, c *ps.Client, cfg Config) (*Report, error) {
	train, err := data.ReadRegression(cfg.Train)
	if err == nil {
		err = data.CheckRows(cfg.Train, train.Len())
	}
	if err != nil {
		return nil, fmt.Errorf("lasso: %w", err)
	}
	if cfg.Model != "" && train.NumFeatures > MaxModelFeatures {
		return nil, fmt.Errorf("lasso: %s: %w: its largest index is %d, and a liblinear model file holds a line for every index up to it (at most %d here); train without --model, or number the features densely", cfg.Train, ErrModelTooWide, train.NumFeatures-1, MaxModelFeatures)
	}
	var test *data.Sparse
	if cfg.Test != "" {
		if test, err = data.ReadRegression(cfg.Test); err == nil {
			err = data.CheckRows(cfg.Test, test.Len())
		}
		if err != nil {
			return nil, fmt.Errorf("lasso: %w", err)
		}
	}
	p := NewProblem(train)
	if p.d == 0 {
		return nil, fmt.Errorf("lasso: %s holds no features", cfg.Train)
	}
	lambda := cfg.Lambda
	if lambda <= 0 {
		lambda = cfg.LambdaRatio * p.LambdaMax()
	}
	sum := table.Rule{Kind: table.Sum}
	w, err := c.CreateTable(ctx, table.Spec{Name: WeightsTable, Width: 1, Rule: sum, Consistency: cfg.Consistency})
	if err != nil {
		return nil, fmt.Errorf("lasso: %w", err)
	}
	xw, err := c.CreateTable(ctx, table.Spec{Name: PredictionsTable, Width: 1, Rule: sum, Consistency: cfg.Consistency})
	if err != nil {
		return nil, fmt.Errorf("lasso: %w", err)
	}
	m := &worker{c: c, p: p, features: train.NumFeatures, w: w, xw: xw, lambda: lambda, revisit: max(cfg.Revisit, 1), slot: make([]int32, p.n), zeroRuns: make([]uint8, p.d)}
	blocks := data.Partition(p.d, c.Layout().Partitions)
	rep := &Report{App: "lasso", Rank: c.Rank(), Lambda: lambda}
	eval := func(pass int) ps.EvalFunc {
		model := ""
		if pass+1 == cfg.Passes {
			model = cfg.Model // the model saved is the model scored
		}
		return func(ctx context.Context) (map[string]float64, error) {
			obj, nz, rmse, err := m.evaluate(ctx, test, model)
			out := map[string]float64{"objective": obj, "nonzero": float64(nz)}
			if test != nil {
				out["test_rmse"] = rmse
			}
			return out, err
		}
	}
	start := time.Now()
	err = c.RunPasses(ctx, ps.Passes{
		N: cfg.Passes,
		Loop: func(pass int) ps.Loop {
			m.pass = pass
			return ps.Loop{
				// Every worker visits a block in the same order (a lease
				// taken over goes on from an offset into it); which
				// coordinates a visit updates is the worker's schedule.
				Order: func(_, b int) []int { return inOrder(blocks[b]) },
				Batch: cfg.Batch, Step: m.step,
			}
		},
		Eval: eval,
		Result: ps.Collect(&rep.Passes, func(r ps.PassResult, secs float64) PassStats {
			return PassStats{Pass: r.Pass, Seconds: secs, Objective: r.Metrics["objective"], NonZero: int(r.Metrics["nonzero"]), TestRMSE: r.Metrics["test_rmse"]}
		}, cfg.Progress),
	})
	if err != nil {
		return nil, fmt.Errorf("lasso: %w", err)
	}
	rep.Seconds = time.Since(start).Seconds()
	rep.Updates, rep.Skipped = m.updates, m.skipped
	if n := len(rep.Passes); n > 0 {
		last := rep.Passes[n-1]
		rep.Objective, rep.NonZero, rep.TestRMSE = last.Objective, last.NonZero, last.TestRMSE
	}
	if err := c.Finish().Wait(ctx); err != nil {
		return nil, err
	}
	return rep, nil
}

// inOrder is a block's coordinates in increasing order (the pulls want
// their keys sorted).
func inOrder(b data.Part) []int {
	out := make([]int, 0, b.Len())
	for j := b.Lo; j < b.Hi; j++ {
		out = append(out, j)
	}
	return out
}

type worker struct {
	c        *ps.Client
	p        *Problem
	features uint64 // the training data's largest index + 1 (the model file's width)
	w, xw    *ps.Table
	lambda   float64
	revisit  int
	pass     int
	// slot maps a row to its place in a step's rows (+1; 0: not in it).
	slot []int32
	rows []uint64
	// zeroRuns counts, by coordinate, this worker's last updates in a row
	// that left it at zero (at most 2): the schedule's memory.
	zeroRuns         []uint8
	updates, skipped int64
}

// due reports whether coordinate j is updated in this pass: one that sat
// at zero for its last two updates waits for every revisit-th pass.
func (m *worker) due(j int) bool {
	return m.zeroRuns[j] < 2 || m.pass%m.revisit == 0
}

// step updates the due coordinates of b, one after another against the
// predictions of the rows they touch, and pushes the weights' and the
// predictions' deltas.
func (m *worker) step(ctx context.Context, b ps.Batch) (*ps.Future, error) {
	p := m.p
	var coords []uint64
	for _, j := range b.Rows {
		if m.due(j) {
			coords = append(coords, uint64(j))
		} else {
			m.skipped++
		}
	}
	if len(coords) == 0 {
		return nil, nil
	}
	m.rows = m.rows[:0]
	for _, j := range coords {
		for t := p.colPtr[j]; t < p.colPtr[j+1]; t++ {
			if r := p.rowIdx[t]; m.slot[r] == 0 {
				m.slot[r] = 1
				m.rows = append(m.rows, uint64(r))
			}
		}
	}
	slices.Sort(m.rows)
	for i, r := range m.rows {
		m.slot[r] = int32(i + 1)
	}
	defer func() {
		for _, r := range m.rows {
			m.slot[r] = 0
		}
	}()
	keys := make([]uint64, len(coords)) // increasing, as coords are
	for i, j := range coords {
		keys[i] = p.keys[j]
	}
	w := make([]float32, len(coords))
	xw := make([]float32, len(m.rows))
	if err := ps.All(m.w.Pull(keys, w), m.xw.Pull(m.rows, xw)).Wait(ctx); err != nil {
		return nil, err
	}
	dw, dxw := make([]float32, len(coords)), make([]float32, len(m.rows))
	for i, j := range coords {
		cur := float64(w[i])
		nw := p.update(int(j), cur, m.lambda, func(r int32) float64 { return float64(xw[m.slot[r]-1]) })
		m.updates++
		if nw == 0 && cur == 0 {
			m.zeroRuns[j] = min(m.zeroRuns[j]+1, 2)
		} else {
			m.zeroRuns[j] = 0
		}
		d := nw - cur
		if d == 0 {
			continue
		}
		dw[i] = float32(d)
		for t := p.colPtr[j]; t < p.colPtr[j+1]; t++ {
			at := m.slot[p.rowIdx[t]] - 1
			v := float32(float64(p.vals[t]) * d)
			xw[at] += v
			dxw[at] += v
		}
	}
	if err := ps.All(m.w.Push(keys, dw), m.xw.Push(m.rows, dxw)).Wait(ctx); err != nil {
		return nil, err
	}
	m.c.Tick()
	return nil, nil
}

// evaluate pulls every weight and computes the objective exactly (the
// predictions from the weights, not the predictions table), the nonzero
// weights and, with test data, its RMSE; with model set, it writes the
// weights there.
func (m *worker) evaluate(ctx context.Context, test *data.Sparse, model string) (obj float64, nz int, rmse float64, err error) {
	p := m.p
	w32 := make([]float32, p.d)
	if err := m.w.Pull(p.keys, w32).Wait(ctx); err != nil {
		return 0, 0, 0, fmt.Errorf("pull weights: %w", err)
	}
	w := make([]float64, p.d)
	for j, v := range w32 {
		w[j] = float64(v)
	}
	obj, nz = p.Objective(w, m.lambda)
	if model != "" {
		if err := SaveLIBLINEAR(model, p.keys, w, m.features, p.mean); err != nil {
			return 0, 0, 0, err
		}
	}
	if test != nil && test.Len() > 0 {
		var sq float64
		for i := range test.Len() {
			fk, fv, y := test.Row(i)
			e := float64(y) - predict(fk, fv, func(f uint64) float64 { return p.weight(w, f) }, p.mean)
			sq += e * e
		}
		rmse = math.Sqrt(sq / float64(test.Len()))
	}
	return obj, nz, rmse, nil
}
