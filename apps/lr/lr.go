package lr

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/internal/modelfile"
	"github.com/terrace-ml/terrace/metrics"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// Config configures a training run.
type Config struct {
	Train, Test string
	// Passes is the number of passes over the training data.
	Passes int
	// Batch is the number of examples in one worker's minibatch (0:
	// AutoBatch of the training data).
	Batch       int
	Rule        table.Rule
	Consistency table.Consistency
	Encoding    table.Encoding
	// Significance turns on the significantly-modified push filter.
	Significance float32
	Seed         uint64
	// Scale divides every feature by its largest absolute value in the
	// training data (MaxAbsScale) before training; exported models are
	// on raw values either way.
	Scale bool
	// Model, when set, is where the worker that evaluates the last pass
	// writes the model, as a liblinear model file labelled 1 and NegLabel
	// (-1 if empty).
	Model, NegLabel string
	// Progress, when set, is called after every pass this worker
	// evaluates (the coordinator hands each pass to one live worker).
	Progress func(PassStats)
}

// DefaultConfig is the configuration `terrace train --app lr` starts from.
func DefaultConfig() Config {
	return Config{
		Passes: 10,
		Batch:  100,
		// alpha 1 on features scaled to [-1, 1] (Scale): within 0.5 points
		// of liblinear's accuracy on a9a, MNIST's pixels and scikit-learn's
		// breast-cancer and digits sets (docs/design/jobs.md).
		Rule:        table.Rule{Kind: table.FTRL, LR: 1, Beta: 1, L1: 0.001, L2: 0.01},
		Consistency: table.Consistency{Model: table.SSP, Staleness: 2},
		Seed:        1,
		Scale:       true,
	}
}

// PassStats is rank 0's view after one pass.
type PassStats struct {
	Pass    int     `json:"pass"`
	Seconds float64 `json:"seconds"`
	// TrainLogLoss is the evaluating worker's mean training log loss over
	// the pass; nil when it trained none of the pass (another worker did,
	// or the pass was restored from a checkpoint).
	TrainLogLoss *float64 `json:"train_logloss,omitempty"`
	TestAccuracy float64  `json:"test_accuracy"`
	TestLogLoss  float64  `json:"test_logloss"`
	TestAUC      float64  `json:"test_auc"`
}

// Report is one worker's result; test metrics are rank 0's.
type Report struct {
	App               string  `json:"app"`
	Rank              int     `json:"rank"`
	Examples          int64   `json:"examples"`
	Seconds           float64 `json:"seconds"`
	ExamplesPerSecond float64 `json:"examples_per_second"`
	TestAccuracy      float64 `json:"test_accuracy,omitempty"`
	TestLogLoss       float64 `json:"test_logloss,omitempty"`
	TestAUC           float64 `json:"test_auc,omitempty"`
	Refused           int64   `json:"refused_non_finite"`
	// Batch is the minibatch trained with: the job's, or AutoBatch's.
	Batch  int         `json:"batch"`
	Passes []PassStats `json:"passes,omitempty"`
}

// TableName is the weight table's name.
const TableName = "lr.weights"

// progressEvery is how many minibatches pass between progress records: what
// a dead worker's successor repeats at most.
const progressEvery = 8

// window is how many minibatches may have their pushes unacknowledged.
const window = 8

// lookahead is how many minibatches ahead a worker fetches the weights of
// under ASP, whose reads never wait: as many as may have pushes in flight.
// With one, the step waited for its weights half of the time on loopback
// (a pull queues at the server behind the pushes before it, and its round
// trip is longer than a minibatch's compute); with eight, terrace bench
// app went from 0.70 to 0.95-0.98 of the local loop with the same test
// AUC and log loss (docs/bench.md).
const lookahead = window

// Key 0 holds the bias; feature f is key f+1.
func featureKey(f uint64) uint64 { return f + 1 }

// Run trains on this worker's partitions of cfg.Train and evaluates on
// cfg.Test after every pass the job hands it the evaluation of.
func Run(ctx context.Context, c *ps.Client, cfg Config) (*Report, error) {
	train, err := data.ReadLIBSVM(cfg.Train)
	if err == nil {
		err = data.CheckRows(cfg.Train, train.Len())
	}
	if err != nil {
		return nil, fmt.Errorf("lr: %w", err)
	}
	var test *data.Sparse
	// Every worker reads the test data: whichever is live when a pass
	// ends evaluates it.
	if cfg.Test != "" {
		if test, err = data.ReadLIBSVM(cfg.Test); err == nil {
			err = data.CheckRows(cfg.Test, test.Len())
		}
		if err != nil {
			return nil, fmt.Errorf("lr: %w", err)
		}
	}
	tbl, err := c.CreateTable(ctx, table.Spec{Name: TableName, Width: 1, Rule: cfg.Rule, Consistency: cfg.Consistency, Encoding: cfg.Encoding, Significance: cfg.Significance})
	if err != nil {
		return nil, fmt.Errorf("lr: %w", err)
	}
	parts := data.Partition(train.Len(), c.Layout().Partitions)
	if cfg.Batch <= 0 {
		cfg.Batch = AutoBatch(train.Len())
	}
	nkeys := featureKey(train.NumFeatures)
	if test != nil {
		nkeys = max(nkeys, featureKey(test.NumFeatures))
	}
	if cfg.Model != "" {
		widest, file := train.NumFeatures, cfg.Train
		if test != nil && test.NumFeatures > widest {
			widest, file = test.NumFeatures, cfg.Test
		}
		if widest > modelfile.MaxModelFeatures {
			return nil, fmt.Errorf("lr: --model %s: %s: %w: its largest index is %d, and a liblinear model file holds a line for every index up to it (at most %d); train without --model", cfg.Model, file, modelfile.ErrModelTooWide, widest-1, modelfile.MaxModelFeatures)
		}
	}
	var scale Scale
	if cfg.Scale {
		scale = MaxAbsScale(train)
		scale.Apply(train)
		if test != nil {
			scale.Apply(test)
		}
	}
	w := newWorker(c, train, tbl, cfg.Consistency)
	rep := &Report{App: "lr", Rank: c.Rank(), Batch: cfg.Batch}
	// evalAt scores the model after pass (from 0); after the last, with
	// --model, from the same pull that is saved, so that the model saved
	// is the model scored.
	evalAt := func(pass int, trainLoss float64) ps.EvalFunc {
		return func(ctx context.Context) (map[string]float64, error) {
			var acc, ll, auc float64
			var err error
			if pass+1 == cfg.Passes && cfg.Model != "" {
				acc, ll, auc, err = saveModel(ctx, tbl, nkeys, scale, test, cfg)
			} else {
				acc, ll, auc, err = Evaluate(ctx, tbl, test, nkeys)
			}
			m := map[string]float64{"test_accuracy": acc, "test_logloss": ll, "test_auc": auc}
			if !math.IsNaN(trainLoss) {
				m["train_logloss"] = trainLoss
			}
			return m, err
		}
	}
	var eval func(pass int) ps.EvalFunc
	if test != nil {
		eval = func(pass int) ps.EvalFunc {
			loss := math.NaN() // this worker trained none of the pass
			if w.n > 0 {
				loss = w.loss / float64(w.n)
			}
			return evalAt(pass, loss)
		}
	}
	start := time.Now()
	// Partitions are leased: a dead or drained worker's partition is
	// finished by another from its last recorded offset, and a pass's loop
	// returns when every partition of the pass is trained, which is the
	// pass's barrier.
	err = c.RunPasses(ctx, ps.Passes{
		N: cfg.Passes,
		Loop: func(int) ps.Loop {
			w.loss, w.n = 0, 0
			return ps.Loop{
				Order: func(pass, p int) []int { return parts[p].Order(cfg.Seed, pass) },
				Batch: cfg.Batch, Step: w.step, ProgressEvery: progressEvery, Window: window, Lookahead: lookahead,
			}
		},
		Trained: func(ctx context.Context, _ int) error {
			rep.Examples += int64(w.n)
			if err := tbl.Flush().Wait(ctx); err != nil {
				return fmt.Errorf("flush: %w", err)
			}
			return nil
		},
		Eval: eval,
		Result: ps.Collect(&rep.Passes, func(r ps.PassResult, secs float64) PassStats {
			return PassStats{Pass: r.Pass, Seconds: secs, TrainLogLoss: r.Metric("train_logloss"), TestAccuracy: r.Metrics["test_accuracy"],
				TestLogLoss: r.Metrics["test_logloss"], TestAUC: r.Metrics["test_auc"]}
		}, cfg.Progress),
	})
	if err != nil {
		return nil, fmt.Errorf("lr: %w", err)
	}
	rep.Seconds = time.Since(start).Seconds()
	rep.ExamplesPerSecond = float64(rep.Examples) / rep.Seconds
	rep.Refused = tbl.Refused()
	if n := len(rep.Passes); n > 0 {
		last := rep.Passes[n-1]
		rep.TestAccuracy, rep.TestLogLoss, rep.TestAUC = last.TestAccuracy, last.TestLogLoss, last.TestAUC
	}
	if err := c.Finish().Wait(ctx); err != nil {
		return nil, err
	}
	return rep, nil
}

// Evaluate pulls the weights of test's features below nkeys, and the
// bias, and scores test. It pulls those keys only, not the range up to
// nkeys: a pull creates the keys it reads, and a range of sparse ids (50
// million for a test set of 300,000 features) filled the servers with
// zeros and every evaluation with their copy.
func Evaluate(ctx context.Context, tbl *ps.Table, test *data.Sparse, nkeys uint64) (acc, logloss, auc float64, err error) {
	f := data.NumberFeatures(test)
	n, _ := slices.BinarySearch(f.Keys, nkeys) // the features below nkeys
	w := make([]float32, n)
	if err := tbl.Pull(f.Keys[:n], w).Wait(ctx); err != nil {
		return 0, 0, 0, fmt.Errorf("lr: pull model: %w", err)
	}
	probs := make([]float64, test.Len())
	for i := range probs {
		lo, hi := test.RowPtr[i], test.RowPtr[i+1]
		z := float64(w[0])
		for j, li := range f.Local[lo:hi] {
			if int(li) < n {
				z += float64(w[li]) * float64(test.Vals[lo+j])
			}
		}
		probs[i] = sigmoid(z)
	}
	return metrics.Accuracy(test.Labels, probs), metrics.LogLoss(test.Labels, probs), metrics.AUC(test.Labels, probs), nil
}

// evaluateWeights scores test with the weights model (by key).
func evaluateWeights(model []float32, test *data.Sparse, nkeys uint64) (acc, logloss, auc float64) {
	probs := make([]float64, test.Len())
	for i := range probs {
		keys, vals, _ := test.Row(i)
		z := float64(model[0])
		for j, k := range keys {
			if fk := featureKey(k); fk < nkeys {
				z += float64(model[fk]) * float64(vals[j])
			}
		}
		probs[i] = sigmoid(z)
	}
	return metrics.Accuracy(test.Labels, probs), metrics.LogLoss(test.Labels, probs), metrics.AUC(test.Labels, probs)
}

func sigmoid(z float64) float64 {
	if z >= 0 {
		return 1 / (1 + math.Exp(-z))
	}
	e := math.Exp(z)
	return e / (1 + e)
}

// worker holds one worker's scratch space for minibatches.
type worker struct {
	c     *ps.Client
	train *data.Sparse
	tbl   *ps.Table
	// prefetch is set under ASP, whose reads never wait on clocks: the
	// weights of the next lookahead minibatches are then fetched while
	// this one computes.
	prefetch bool
	// clocked is false under ASP, for which a clock message per minibatch
	// would be pure overhead.
	clocked bool
	// f numbers the training data's features; pos and stamp are by
	// that number. pos maps a feature to its index in the current batch's
	// key list; every feature a batch reads is set before the batch uses
	// it. stamp marks the features already collected for the batch being
	// prepared (gen), so that only distinct ones are sorted.
	f     data.Features
	pos   []int32
	stamp []uint32
	gen   uint32
	// ahead are the prefetched minibatches, in the loop's order.
	ahead []*batch
	// loss and n sum the training log loss and the examples of the pass.
	loss float64
	n    int
}

func newWorker(c *ps.Client, train *data.Sparse, tbl *ps.Table, cons table.Consistency) *worker {
	f := data.NumberFeatures(train)
	return &worker{c: c, train: train, tbl: tbl, prefetch: cons.Bound() < 0, clocked: cons.Model != table.ASP,
		f: f, pos: make([]int32, len(f.Keys)), stamp: make([]uint32, len(f.Keys))}
}

// batch is one minibatch's key list (and the features' local numbers,
// in the same order) and weights.
type batch struct {
	rows   []int
	locals []int32
	keys   []uint64
	w      []float32
	pull   *ps.Future
}

func (wk *worker) prepare(rows []int) *batch {
	wk.gen++
	b := &batch{rows: rows, locals: []int32{0}}
	wk.stamp[0] = wk.gen
	for _, r := range rows {
		for _, li := range wk.f.Local[wk.train.RowPtr[r]:wk.train.RowPtr[r+1]] {
			if wk.stamp[li] != wk.gen {
				wk.stamp[li] = wk.gen
				b.locals = append(b.locals, li)
			}
		}
	}
	slices.Sort(b.locals) // local numbers sort as their keys do
	b.keys = make([]uint64, len(b.locals))
	for i, li := range b.locals {
		b.keys[i] = wk.f.Keys[li]
	}
	b.w = make([]float32, len(b.keys))
	b.pull = wk.tbl.Pull(b.keys, b.w)
	return b
}

// step is the partition loop's Step: it trains one minibatch and returns
// its gradient push. Under ASP it prefetches the weights of the next
// minibatches (lookahead of them) while this one computes.
func (wk *worker) step(ctx context.Context, b ps.Batch) (*ps.Future, error) {
	var cur *batch
	if len(wk.ahead) > 0 && sameRows(wk.ahead[0].rows, b.Rows) {
		cur = wk.ahead[0]
		wk.ahead = slices.Delete(wk.ahead, 0, 1)
	} else {
		wk.dropAhead(ctx, 0) // prefetches the loop did not train (a drain, a cut)
		cur = wk.prepare(b.Rows)
	}
	if wk.prefetch {
		for i, rows := range b.Next {
			if i < len(wk.ahead) && !sameRows(wk.ahead[i].rows, rows) {
				wk.dropAhead(ctx, i)
			}
			if i == len(wk.ahead) {
				wk.ahead = append(wk.ahead, wk.prepare(rows))
			}
		}
	}
	if err := cur.pull.Wait(ctx); err != nil {
		return nil, err
	}
	grad, loss := wk.gradient(cur)
	wk.loss += loss
	wk.n += len(b.Rows)
	push := wk.tbl.Push(cur.keys, grad)
	if wk.clocked {
		wk.c.Tick()
	}
	return push, nil
}

// dropAhead waits for and forgets the prefetches from the i-th on.
func (wk *worker) dropAhead(ctx context.Context, i int) {
	for _, p := range wk.ahead[i:] {
		p.pull.Wait(ctx)
	}
	clear(wk.ahead[i:])
	wk.ahead = wk.ahead[:i]
}

// sameRows reports whether a and b are the same minibatch: the same
// stretch of one lease's order.
func sameRows(a, b []int) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// gradient returns the minibatch's mean log-loss gradient on cur's keys and
// its summed log loss.
func (wk *worker) gradient(cur *batch) ([]float32, float64) {
	for i, li := range cur.locals {
		wk.pos[li] = int32(i)
	}
	grad := make([]float32, len(cur.keys))
	var loss float64
	for _, r := range cur.rows {
		lo, hi := wk.train.RowPtr[r], wk.train.RowPtr[r+1]
		locals, vals, y := wk.f.Local[lo:hi], wk.train.Vals[lo:hi], wk.train.Labels[r]
		z := float64(cur.w[0])
		for j, li := range locals {
			z += float64(cur.w[wk.pos[li]]) * float64(vals[j])
		}
		p := sigmoid(z)
		if y > 0 {
			loss -= math.Log(max(p, 1e-15))
		} else {
			loss -= math.Log(max(1-p, 1e-15))
		}
		g := float32(p - float64(y))
		grad[0] += g
		for j, li := range locals {
			grad[wk.pos[li]] += g * vals[j]
		}
	}
	scale := 1 / float32(max(len(cur.rows), 1))
	for i := range grad {
		grad[i] *= scale
	}
	return grad, loss
}
