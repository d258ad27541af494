package mlr

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/internal/modelfile"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// Config configures a training run.
type Config struct {
	Train, Test string
	// Passes is the number of passes over the training data; Batch the
	// examples in one worker's minibatch, whose gradient is averaged.
	Passes, Batch int
	// Hidden, when positive, puts a hidden layer of that many ReLU units
	// before the softmax: a small neural network (`--app nn`).
	Hidden int
	// Optimizer is the servers' update rule (table.AdaGrad or table.SGD),
	// LR its step and L2 its weight decay.
	Optimizer   table.RuleKind
	LR, L2      float32
	Consistency table.Consistency
	Encoding    table.Encoding
	Seed        uint64
	// Model, when set, is where the worker that evaluates the last pass
	// writes the model it scores: softmax regression's as a liblinear
	// model file (model.go), the network's as an nn model file
	// (network.go, docs/format/nn.md).
	Model string
	// Progress, when set, is called by the worker that evaluates a pass.
	Progress func(PassStats)
}

// DefaultConfig is the configuration `terrace train --app mlr` starts
// from: AdaGrad, whose per-feature steps suit sparse text (rows of unit
// norm, most features rare) as well as MNIST's pixels in [0, 1]. Plain
// SGD at 0.5 reached 0.92 on MNIST in 3 passes, but on an rcv1-like set
// 0.740 in 10 (liblinear 0.7925), and on a news20-like one a test log
// loss of 2.45 for 20 classes; AdaGrad at 0.1 reaches 0.926, 0.793 in
// 5 passes and 0.06 (docs/design/mlr.md).
func DefaultConfig() Config {
	return Config{Passes: 10, Batch: 100, Optimizer: table.AdaGrad, LR: 0.1, Consistency: table.Consistency{Model: table.SSP, Staleness: 2}, Seed: 1}
}

// DefaultNetworkConfig is the configuration `terrace train --app nn`
// starts from: a hidden layer of 100 ReLU units, trained by SGD at 0.5
// (0.970 on MNIST in 3 passes; AdaGrad at 0.1, 0.964), the rest as mlr's.
func DefaultNetworkConfig() Config {
	c := DefaultConfig()
	c.Hidden, c.Optimizer, c.LR = 100, table.SGD, 0.5
	return c
}

// PassStats is the evaluating worker's view after one pass.
type PassStats struct {
	Pass    int     `json:"pass"`
	Seconds float64 `json:"seconds"`
	// TrainLogLoss is the evaluating worker's own over the pass; nil when
	// it trained none of the pass.
	TrainLogLoss *float64 `json:"train_logloss,omitempty"`
	TestAccuracy float64  `json:"test_accuracy"`
	TestLogLoss  float64  `json:"test_logloss"`
}

// Report is one worker's result; the test metrics are the last pass's.
type Report struct {
	App               string      `json:"app"`
	Rank              int         `json:"rank"`
	Classes           int         `json:"classes"`
	Examples          int64       `json:"examples"`
	Seconds           float64     `json:"seconds"`
	ExamplesPerSecond float64     `json:"examples_per_second"`
	TestAccuracy      float64     `json:"test_accuracy,omitempty"`
	TestLogLoss       float64     `json:"test_logloss,omitempty"`
	Refused           int64       `json:"refused_non_finite"`
	Passes            []PassStats `json:"passes,omitempty"`
}

// The tables: TableName holds softmax regression's weights (key 0 the
// biases, feature f key f+1, one column a class); with a hidden layer,
// HiddenTable holds the input's weights into it (the same keys, one
// column a hidden unit) and OutputTable its weights into the classes
// (hidden unit j key j, the classes' biases key Hidden).
const (
	TableName   = "mlr.weights"
	HiddenTable = "nn.hidden"
	OutputTable = "nn.output"
)

// progressEvery is how many minibatches pass between progress records.
const progressEvery = 16

func featureKey(f uint64) uint64 { return f + 1 }

// network is the model a worker trains: one minibatch's step (pulls, the
// gradient, pushes) and the test metrics, from its tables.
type network interface {
	step(ctx context.Context, rows []int) (loss float64, err error)
	evaluate(ctx context.Context, test *data.Classes, model string) (acc, logloss float64, err error)
	refused() int64
}

// Run trains on this worker's partitions of cfg.Train and evaluates on
// cfg.Test after every pass the job hands it the evaluation of.
func Run(ctx context.Context, c *ps.Client, cfg Config) (*Report, error) {
	name := "mlr"
	if cfg.Hidden > 0 {
		name = "nn"
	}
	train, err := data.ReadClasses(cfg.Train)
	if err == nil {
		err = data.CheckRows(cfg.Train, train.Len())
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var test *data.Classes
	if cfg.Test != "" {
		if test, err = data.ReadClasses(cfg.Test); err == nil {
			err = data.CheckRows(cfg.Test, test.Len())
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	classes := train.NumClasses
	widest := train.X // the data of the largest index
	if test != nil {
		// The table's width is fixed at its creation: a class only the
		// test data has would have no column.
		if test.NumClasses > classes {
			return nil, fmt.Errorf("%s: %s has class %d, and %s none above %d", name, cfg.Test, test.NumClasses-1, cfg.Train, classes-1)
		}
		if test.X.NumFeatures > widest.NumFeatures {
			widest = test.X
		}
	}
	if classes < 2 {
		return nil, fmt.Errorf("%s: %s: %d class(es); want two or more", name, cfg.Train, classes)
	}
	if cfg.Hidden <= 0 && cfg.Model != "" && widest.NumFeatures > modelfile.MaxModelFeatures {
		file := cfg.Train
		if widest != train.X {
			file = cfg.Test
		}
		return nil, fmt.Errorf("mlr: --model %s: %s: %w: its largest index is %d, and a liblinear model file holds a line for every index up to it (at most %d); train without --model", cfg.Model, file, ErrModelTooWide, widest.NumFeatures-1, modelfile.MaxModelFeatures)
	}
	net, err := newNetwork(ctx, c, cfg, train, classes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	parts := data.Partition(train.Len(), c.Layout().Partitions)
	m := &trainer{c: c, net: net}
	rep := &Report{App: name, Rank: c.Rank(), Classes: classes}
	var eval func(pass int) ps.EvalFunc
	if test != nil {
		eval = func(pass int) ps.EvalFunc {
			loss := math.NaN() // this worker trained none of the pass
			if m.n > 0 {
				loss = m.loss / float64(m.n)
			}
			model := ""
			if pass+1 == cfg.Passes {
				model = cfg.Model // the model saved is the model scored
			}
			return func(ctx context.Context) (map[string]float64, error) {
				acc, ll, err := net.evaluate(ctx, test, model)
				out := map[string]float64{"test_accuracy": acc, "test_logloss": ll}
				if !math.IsNaN(loss) {
					out["train_logloss"] = loss
				}
				return out, err
			}
		}
	}
	start := time.Now()
	err = c.RunPasses(ctx, ps.Passes{
		N: cfg.Passes,
		Loop: func(int) ps.Loop {
			m.loss, m.n = 0, 0
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
			return PassStats{Pass: r.Pass, Seconds: secs, TrainLogLoss: r.Metric("train_logloss"),
				TestAccuracy: r.Metrics["test_accuracy"], TestLogLoss: r.Metrics["test_logloss"]}
		}, cfg.Progress),
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	rep.Seconds = time.Since(start).Seconds()
	rep.ExamplesPerSecond = float64(rep.Examples) / rep.Seconds
	rep.Refused = net.refused()
	if n := len(rep.Passes); n > 0 {
		rep.TestAccuracy, rep.TestLogLoss = rep.Passes[n-1].TestAccuracy, rep.Passes[n-1].TestLogLoss
	}
	if err := c.Finish().Wait(ctx); err != nil {
		return nil, err
	}
	return rep, nil
}

// newNetwork creates the tables of cfg's model and returns it.
func newNetwork(ctx context.Context, c *ps.Client, cfg Config, train *data.Classes, classes int) (network, error) {
	rule := table.Rule{Kind: cfg.Optimizer, LR: cfg.LR, L2: cfg.L2}
	spec := func(name string, width int, init table.Init) table.Spec {
		return table.Spec{Name: name, Width: width, Rule: rule, Init: init, Consistency: cfg.Consistency, Encoding: cfg.Encoding}
	}
	f := data.NumberFeatures(train.X)
	keys := keyset{train: train, f: f, slot: make([]int32, len(f.Keys))}
	if cfg.Hidden <= 0 {
		tbl, err := c.CreateTable(ctx, spec(TableName, classes, table.Init{}))
		if err != nil {
			return nil, err
		}
		return &linear{tbl: tbl, k: classes, keyset: keys}, nil
	}
	// He's initialisation for the ReLU layer (standard deviation
	// sqrt(2 / inputs), by the mean features a row has), Glorot's for the
	// output; seeded by key, so every server draws the same.
	fanIn := max(1, float64(len(train.X.Keys))/float64(max(train.Len(), 1)))
	hidden, err := c.CreateTable(ctx, spec(HiddenTable, cfg.Hidden, table.Init{Kind: table.Normal, Scale: float32(math.Sqrt(2 / fanIn)), Seed: cfg.Seed}))
	if err != nil {
		return nil, err
	}
	out, err := c.CreateTable(ctx, spec(OutputTable, classes, table.Init{Kind: table.Normal, Scale: float32(math.Sqrt(2 / float64(cfg.Hidden+classes))), Seed: cfg.Seed + 1}))
	if err != nil {
		return nil, err
	}
	return &mlp{hidden: hidden, out: out, h: cfg.Hidden, k: classes, keyset: keys}, nil
}

// trainer sums a pass's training loss over the steps of its network.
type trainer struct {
	c   *ps.Client
	net network
	// loss and n sum the training log loss and the examples of the pass.
	loss float64
	n    int
}

// keyset lists a minibatch's input keys and where each lies in the list.
type keyset struct {
	train *data.Classes
	// f numbers the training data's features; slot is by that number.
	f data.Features
	// slot maps a feature to its place in the minibatch's keys (+1; 0:
	// not in it), reset after each minibatch.
	slot   []int32
	locals []int32
	keys   []uint64
}

// linear is softmax regression.
type linear struct {
	tbl *ps.Table
	k   int
	keyset
}

func (m *linear) refused() int64 { return m.tbl.Refused() }

// loopStep is the partition loop's Step: one minibatch, whose push it
// waits for itself.
func (m *trainer) loopStep(ctx context.Context, b ps.Batch) (*ps.Future, error) {
	loss, err := m.net.step(ctx, b.Rows)
	if err != nil {
		return nil, err
	}
	m.loss += loss
	m.n += len(b.Rows)
	m.c.Tick()
	return nil, nil
}

// gather lists the keys of rows in order (the bias, key 0, first), and
// numbers them in slot; release forgets them.
func (m *keyset) gather(rows []int) []uint64 {
	m.locals = append(m.locals[:0], 0)
	m.slot[0] = 1
	x := m.train.X
	for _, i := range rows {
		for _, li := range m.f.Local[x.RowPtr[i]:x.RowPtr[i+1]] {
			if m.slot[li] == 0 {
				m.locals = append(m.locals, li)
				m.slot[li] = 1
			}
		}
	}
	slices.Sort(m.locals) // local numbers sort as their keys do
	m.keys = m.keys[:0]
	for i, li := range m.locals {
		m.keys = append(m.keys, m.f.Keys[li])
		m.slot[li] = int32(i + 1)
	}
	return m.keys
}

func (m *keyset) release() {
	for _, li := range m.locals {
		m.slot[li] = 0
	}
}

// places lists where training row i's features lie in the minibatch's
// keys.
func (m *keyset) places(dst []int, i int) []int {
	dst = dst[:0]
	for _, li := range m.f.Local[m.train.X.RowPtr[i]:m.train.X.RowPtr[i+1]] {
		dst = append(dst, int(m.slot[li]-1))
	}
	return dst
}

// evalKeys are the keys an evaluation of test pulls (the bias, key 0,
// first) and each of test's values' place among them: test's features,
// and with a model to write, the training data's too, whose weights the
// model holds. A feature only test has reads as the table's initial
// value, as it did when evaluations pulled every key up to the largest.
func (m *keyset) evalKeys(test *data.Classes, model string) ([]uint64, []int32) {
	var also []uint64
	if model != "" {
		also = m.f.Keys
	}
	return scoringKeys(test.X, also)
}

// testPlaces lists where test row i's features lie in the evaluation's
// keys, given each value's place at.
func testPlaces(dst []int, test *data.Classes, at []int32, i int) []int {
	dst = dst[:0]
	for _, p := range at[test.X.RowPtr[i]:test.X.RowPtr[i+1]] {
		dst = append(dst, int(p))
	}
	return dst
}

// step trains one minibatch and returns its summed log loss.
func (m *linear) step(ctx context.Context, rows []int) (float64, error) {
	keys := m.gather(rows)
	defer m.release()
	k := m.k
	w := make([]float32, len(keys)*k)
	if err := m.tbl.Pull(keys, w).Wait(ctx); err != nil {
		return 0, err
	}
	g := make([]float32, len(w))
	p, d := make([]float64, k), make([]float32, k)
	var loss float64
	var places []int
	scale := 1 / float32(len(rows))
	for _, i := range rows {
		_, fv, _ := m.train.X.Row(i)
		places = m.places(places, i)
		y := int(m.train.Class[i])
		logits(p, w, places, fv, k)
		loss -= math.Log(max(softmax(p)[y], 1e-15))
		for c := range k {
			d[c] = float32(p[c]) * scale
		}
		d[y] -= scale
		for c := range k {
			g[c] += d[c] // the bias, key 0 at place 0
		}
		for j, at := range places {
			row := g[at*k : at*k+k]
			for c := range k {
				row[c] += d[c] * fv[j]
			}
		}
	}
	if err := m.tbl.Push(keys, g).Wait(ctx); err != nil {
		return 0, err
	}
	return loss, nil
}

// logits writes into p each class's score of a row, whose features'
// values fv have their weights at rows places of w (the bias row first).
func logits(p []float64, w []float32, places []int, fv []float32, k int) {
	for c := range k {
		p[c] = float64(w[c])
	}
	for j, at := range places {
		row := w[at*k : at*k+k]
		for c := range k {
			p[c] += float64(fv[j] * row[c])
		}
	}
}

// softmax turns scores into probabilities in place, and returns p.
func softmax(p []float64) []float64 {
	hi := p[0]
	for _, v := range p {
		hi = max(hi, v)
	}
	var sum float64
	for c, v := range p {
		p[c] = math.Exp(v - hi)
		sum += p[c]
	}
	for c := range p {
		p[c] /= sum
	}
	return p
}

// evaluate pulls the model's weights of test's features (and with model
// set, of the training data's, which it writes there) and scores test.
func (m *linear) evaluate(ctx context.Context, test *data.Classes, model string) (acc, logloss float64, err error) {
	keys, at := m.evalKeys(test, model)
	w := make([]float32, len(keys)*m.k)
	if err := m.tbl.Pull(keys, w).Wait(ctx); err != nil {
		return 0, 0, fmt.Errorf("pull model: %w", err)
	}
	if model != "" {
		if err := SaveLIBLINEAR(model, keys, w, m.k); err != nil {
			return 0, 0, err
		}
	}
	var places []int
	acc, logloss = score(test, m.k, func(p []float64, i int) {
		_, fv, _ := test.X.Row(i)
		places = testPlaces(places, test, at, i)
		logits(p, w, places, fv, m.k)
	})
	return acc, logloss, nil
}

// score is the accuracy (the most probable class is the row's) and the
// mean log loss over test, whose row i's class scores forward writes.
func score(test *data.Classes, k int, forward func(p []float64, i int)) (acc, logloss float64) {
	p := make([]float64, k)
	var right int
	for i := range test.Len() {
		forward(p, i)
		y := int(test.Class[i])
		if argmax(softmax(p)) == y {
			right++
		}
		logloss -= math.Log(max(p[y], 1e-15))
	}
	n := float64(max(test.Len(), 1))
	return float64(right) / n, logloss / n
}
