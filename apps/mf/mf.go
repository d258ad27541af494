package mf

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/metrics"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// Config configures a training run.
type Config struct {
	Train, Test string
	// Passes is the number of passes over the training data.
	Passes int
	// Rank is the number of latent factors.
	Rank int
	// Batch is the number of ratings in one worker's minibatch.
	Batch       int
	LR          float32
	L2          float32
	Consistency table.Consistency
	Seed        uint64
	// Model, when set, is the directory where the worker that evaluates
	// the last pass writes the model as TSV (export.go).
	Model string
	// Progress, when set, is called by rank 0 after every pass.
	Progress func(PassStats)
}

// DefaultConfig is the configuration `terrace train --app mf` starts from.
func DefaultConfig() Config {
	return Config{Passes: 30, Rank: 64, Batch: 64, LR: 0.01, L2: 0.08, Consistency: table.Consistency{Model: table.SSP, Staleness: 2}, Seed: 1}
}

// PassStats is rank 0's view after one pass.
type PassStats struct {
	Pass    int     `json:"pass"`
	Seconds float64 `json:"seconds"`
	// TrainRMSE is the evaluating worker's own over the pass; nil when it
	// trained none of the pass (another worker did, or it was restored).
	TrainRMSE *float64 `json:"train_rmse,omitempty"`
	TestRMSE  float64  `json:"test_rmse"`
}

// Report is one worker's result; the test metric is rank 0's.
type Report struct {
	App               string      `json:"app"`
	Rank              int         `json:"rank"`
	Examples          int64       `json:"examples"`
	Seconds           float64     `json:"seconds"`
	ExamplesPerSecond float64     `json:"examples_per_second"`
	TestRMSE          float64     `json:"test_rmse,omitempty"`
	Refused           int64       `json:"refused_non_finite"`
	Passes            []PassStats `json:"passes,omitempty"`
	// UserIDs and ItemIDs describe how this worker numbered a column of
	// string ids (nil: numbers, kept as given). Every worker of a job
	// numbers the training file's ids on its own, and must report the
	// same.
	UserIDs *Numbering `json:"user_ids,omitempty"`
	ItemIDs *Numbering `json:"item_ids,omitempty"`
}

// Numbering describes the numbering of a column of string ids.
type Numbering struct {
	Distinct int `json:"distinct"`
	// Digest is data.IDs.Digest in hexadecimal: the ids in the order of
	// their numbers.
	Digest string `json:"digest"`
}

// numbering describes ids; nil for a column of numbers.
func numbering(ids *data.IDs) *Numbering {
	if ids == nil {
		return nil
	}
	return &Numbering{Distinct: ids.Len(), Digest: fmt.Sprintf("%016x", ids.Digest())}
}

// progressEvery is how many minibatches pass between progress records: what
// a dead worker's successor repeats at most.
const progressEvery = 16

// The tables' names: every user's and item's factors, and their biases.
const (
	FactorsTable = "mf.factors"
	BiasTable    = "mf.bias"
)

// Users and items share one key space: user u is key 2u, item i is 2i+1.
func userKey(u uint32) uint64 { return uint64(u) << 1 }
func itemKey(i uint32) uint64 { return uint64(i)<<1 | 1 }

// Run trains on this worker's partitions of cfg.Train and evaluates on
// cfg.Test after every pass the job hands it the evaluation of.
func Run(ctx context.Context, c *ps.Client, cfg Config) (*Report, error) {
	train, err := data.ReadRatings(cfg.Train)
	if err == nil {
		err = data.CheckRows(cfg.Train, train.Len())
	}
	if err != nil {
		return nil, fmt.Errorf("mf: %w", err)
	}
	var test *data.Ratings
	// Every worker reads the test data: whichever is live when a pass
	// ends evaluates it.
	if cfg.Test != "" {
		// Numbered as the training's ids: a string id gets the same
		// number in both files, and Unseen when training lacks it.
		if test, err = data.ReadRatingsWith(cfg.Test, train.UserIDs, train.ItemIDs); err == nil {
			err = data.CheckRows(cfg.Test, test.Len())
		}
		if err != nil {
			return nil, fmt.Errorf("mf: %w", err)
		}
	}
	rule := table.Rule{Kind: table.SGD, LR: cfg.LR, L2: cfg.L2}
	factors, err := c.CreateTable(ctx, table.Spec{Name: FactorsTable, Width: cfg.Rank, Rule: rule, Consistency: cfg.Consistency,
		Init: table.Init{Kind: table.Normal, Scale: 0.1, Seed: cfg.Seed}})
	if err != nil {
		return nil, fmt.Errorf("mf: %w", err)
	}
	bias, err := c.CreateTable(ctx, table.Spec{Name: BiasTable, Width: 1, Rule: table.Rule{Kind: table.SGD, LR: cfg.LR}, Consistency: cfg.Consistency})
	if err != nil {
		return nil, fmt.Errorf("mf: %w", err)
	}
	parts := data.Partition(train.Len(), c.Layout().Partitions)
	m := &model{c: c, train: train, factors: factors, bias: bias, k: cfg.Rank, mu: float32(train.Mean())}
	m.lo, m.hi = train.Range()
	if test != nil {
		m.trained = trainedIn(train, test)
	}
	rep := &Report{App: "mf", Rank: c.Rank(), UserIDs: numbering(train.UserIDs), ItemIDs: numbering(train.ItemIDs)}
	evalAt := func(pass int, trainRMSE float64) ps.EvalFunc {
		return func(ctx context.Context) (map[string]float64, error) {
			rmse, err := m.evaluate(ctx, test)
			if err == nil && pass+1 == cfg.Passes && cfg.Model != "" {
				err = m.export(ctx, cfg.Model)
			}
			out := map[string]float64{"test_rmse": rmse}
			if !math.IsNaN(trainRMSE) {
				out["train_rmse"] = trainRMSE
			}
			return out, err
		}
	}
	var eval func(pass int) ps.EvalFunc
	if test != nil {
		eval = func(pass int) ps.EvalFunc {
			train := math.NaN() // this worker trained none of the pass
			if m.n > 0 {
				train = math.Sqrt(m.sq / float64(m.n))
			}
			return evalAt(pass, train)
		}
	}
	start := time.Now()
	// Partitions are leased: a dead worker's partition is finished by
	// another from where it got to, and a pass's loop returns when every
	// partition of the pass is trained, which is the pass's barrier.
	err = c.RunPasses(ctx, ps.Passes{
		N: cfg.Passes,
		Loop: func(int) ps.Loop {
			m.sq, m.n = 0, 0
			return ps.Loop{
				Order: func(pass, p int) []int { return parts[p].Order(cfg.Seed, pass) },
				Batch: cfg.Batch, ProgressEvery: progressEvery, Step: m.loopStep,
			}
		},
		Trained: func(context.Context, int) error {
			rep.Examples += int64(m.n)
			return nil
		},
		Eval: eval,
		Result: ps.Collect(&rep.Passes, func(r ps.PassResult, secs float64) PassStats {
			return PassStats{Pass: r.Pass, Seconds: secs, TrainRMSE: r.Metric("train_rmse"), TestRMSE: r.Metrics["test_rmse"]}
		}, cfg.Progress),
	})
	if err != nil {
		return nil, fmt.Errorf("mf: %w", err)
	}
	rep.Seconds = time.Since(start).Seconds()
	rep.ExamplesPerSecond = float64(rep.Examples) / rep.Seconds
	rep.Refused = factors.Refused() + bias.Refused()
	if n := len(rep.Passes); n > 0 {
		rep.TestRMSE = rep.Passes[n-1].TestRMSE
	}
	if err := c.Finish().Wait(ctx); err != nil {
		return nil, err
	}
	return rep, nil
}

type model struct {
	c             *ps.Client
	train         *data.Ratings
	factors, bias *ps.Table
	k             int
	mu            float32
	// lo and hi are the training ratings' scale, which predictions are
	// clipped to.
	lo, hi float32
	pos    map[uint64]int
	// trained marks the test ratings whose user, and whose item, training
	// has (trainedIn).
	trained trained
	// sq and n sum the squared training error and the examples of the
	// pass.
	sq float64
	n  int
}

// loopStep is the partition loop's Step: one minibatch, whose pushes it
// waits for itself.
func (m *model) loopStep(ctx context.Context, b ps.Batch) (*ps.Future, error) {
	sq, err := m.step(ctx, b.Rows)
	if err != nil {
		return nil, err
	}
	m.sq += sq
	m.n += len(b.Rows)
	m.c.Tick()
	return nil, nil
}

// ratingKeys returns the sorted keys of the users and items of rows of
// training ratings (test ratings may have ids training lacks: trainedIn).
func ratingKeys(r *data.Ratings, rows []int) []uint64 {
	keys := make([]uint64, 0, 2*len(rows))
	for _, i := range rows {
		keys = append(keys, userKey(r.Users[i]), itemKey(r.Items[i]))
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// pull fetches the factors and biases of keys.
func (m *model) pull(ctx context.Context, keys []uint64) (f, b []float32, err error) {
	f = make([]float32, len(keys)*m.k)
	b = make([]float32, len(keys))
	if err := ps.All(m.factors.Pull(keys, f), m.bias.Pull(keys, b)).Wait(ctx); err != nil {
		return nil, nil, err
	}
	return f, b, nil
}

// step trains one minibatch and returns its summed squared error.
func (m *model) step(ctx context.Context, rows []int) (float64, error) {
	keys := ratingKeys(m.train, rows)
	f, b, err := m.pull(ctx, keys)
	if err != nil {
		return 0, err
	}
	if m.pos == nil {
		m.pos = make(map[uint64]int)
	}
	clear(m.pos)
	for i, k := range keys {
		m.pos[k] = i
	}
	k := m.k
	gf := make([]float32, len(f))
	gb := make([]float32, len(b))
	var sq float64
	for _, i := range rows {
		u, it := m.pos[userKey(m.train.Users[i])], m.pos[itemKey(m.train.Items[i])]
		pu, qi := f[u*k:(u+1)*k], f[it*k:(it+1)*k]
		pred := m.mu + b[u] + b[it] + dot(pu, qi)
		e := pred - m.train.Values[i]
		sq += float64(e) * float64(e)
		gb[u] += e
		gb[it] += e
		gu, gi := gf[u*k:(u+1)*k], gf[it*k:(it+1)*k]
		for j := range pu {
			gu[j] += e * qi[j]
			gi[j] += e * pu[j]
		}
	}
	if err := ps.All(m.factors.Push(keys, gf), m.bias.Push(keys, gb)).Wait(ctx); err != nil {
		return 0, err
	}
	return sq, nil
}

func (m *model) evaluate(ctx context.Context, test *data.Ratings) (float64, error) {
	keys := make([]uint64, 0, 2*test.Len())
	for i := range test.Len() {
		if m.trained.user[i] {
			keys = append(keys, userKey(test.Users[i]))
		}
		if m.trained.item[i] {
			keys = append(keys, itemKey(test.Items[i]))
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	f, b, err := m.pull(ctx, keys)
	if err != nil {
		return 0, fmt.Errorf("mf: pull model: %w", err)
	}
	pos := make(map[uint64]int, len(keys))
	for i, k := range keys {
		pos[k] = i
	}
	pred := make([]float64, test.Len())
	truth := make([]float64, test.Len())
	for i := range pred {
		// A user or item training lacks counts with bias and factors 0,
		// as in an exported model.
		var bu, bi float32
		var pu, qi []float32
		if m.trained.user[i] {
			j := pos[userKey(test.Users[i])]
			bu, pu = b[j], f[j*m.k:(j+1)*m.k]
		}
		if m.trained.item[i] {
			j := pos[itemKey(test.Items[i])]
			bi, qi = b[j], f[j*m.k:(j+1)*m.k]
		}
		pred[i] = float64(predict(m.mu, bu, bi, pu, qi, m.lo, m.hi))
		truth[i] = float64(test.Values[i])
	}
	return metrics.RMSE(pred, truth), nil
}

// trained marks, for each test rating, whether training has its user and
// its item.
type trained struct{ user, item []bool }

// trainedIn marks the test ratings whose user, and whose item, training
// has. An id training lacks has no factors or bias in an exported model
// (Export writes training's ids), so the evaluation counts it with none
// either, and predict scores the test file as the job did: a string id
// numbered Unseen, and a number training never had, whose key would
// otherwise read as the tables' random initial factors.
func trainedIn(train, test *data.Ratings) trained {
	return trained{user: occurs(train.Users, test.Users), item: occurs(train.Items, test.Items)}
}

// occurs marks which of ids occur in of, in one pass over of whose
// memory follows ids, not of: a bitmap up to the largest of ids when
// that is small, a set of them otherwise.
func occurs(of, ids []uint32) []bool {
	out := make([]bool, len(ids))
	if len(ids) == 0 {
		return out
	}
	if top := slices.Max(ids); top < 1<<27 {
		seen := make([]uint64, top/64+1)
		for _, id := range of {
			if id <= top {
				seen[id/64] |= 1 << (id % 64)
			}
		}
		for i, id := range ids {
			out[i] = seen[id/64]&(1<<(id%64)) != 0
		}
		return out
	}
	seen := make(map[uint32]bool, len(ids))
	for _, id := range ids {
		seen[id] = false
	}
	for _, id := range of {
		if _, ok := seen[id]; ok {
			seen[id] = true
		}
	}
	for i, id := range ids {
		out[i] = seen[id]
	}
	return out
}

// predict is a rating's prediction: the mean rating mu, plus the user's
// and item's biases, plus their factors' dot product (when both have
// factors), clipped to [lo, hi]. The job's evaluation and a loaded
// model's Predict both compute it here, in float32 and in one order, so
// that predict scores a test file exactly as the job did.
func predict(mu, bu, bi float32, pu, qi []float32, lo, hi float32) float32 {
	p := mu + bu + bi
	if pu != nil && qi != nil {
		p += dot(pu, qi)
	}
	return min(max(p, lo), hi)
}

func dot(a, b []float32) float32 {
	var s float32
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}
