package bench

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/terrace-ml/terrace/apps/lr"
	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/internal/storage/optim"
	"github.com/terrace-ml/terrace/metrics"
	"github.com/terrace-ml/terrace/table"
)

// localLR is the single-process baseline for lr: the same minibatches in
// the same order, the same key lists, the same gradient code and the same
// optim update the server applies, but the model is a local slice, so a
// "pull" is a gather and a "push" is an update in place. It is kept in step
// with apps/lr by hand (that package exposes only the worker-API path);
// the test AUCs in the report show when the two drift apart.
type localLR struct {
	train *data.Sparse
	upd   *optim.Updater
	// model and the optimizer state planes, one value per key; FTRL keeps
	// z and n.
	model []float32
	state [][]float32
	// pos maps a key to its index in the current batch's key list.
	pos []int32
	// st is the slice of plane views handed to Apply.
	st [][]float32
}

// lr stores feature f at key f+1 and the bias at key 0.
func featureKey(f uint64) uint64 { return f + 1 }

func newLocalLR(train *data.Sparse, nkeys uint64, rule table.Rule) (*localLR, error) {
	// Validate fills the rule's defaults, as the coordinator does for the
	// parameter server's table.
	spec := table.Spec{Name: "bench.local", Width: 1, Rule: rule}
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("bench: local lr: %w", err)
	}
	upd, err := optim.New(spec.Rule)
	if err != nil {
		return nil, fmt.Errorf("bench: local lr: %w", err)
	}
	m := &localLR{train: train, upd: upd, model: make([]float32, nkeys), pos: make([]int32, nkeys)}
	for range upd.StateSlots() {
		m.state = append(m.state, make([]float32, nkeys))
	}
	m.st = make([][]float32, len(m.state))
	return m, nil
}

// runLocal trains cfg.Passes epochs as lr.Run does with one worker that
// owns every row, timing the epochs only, and scores the test set.
func runLocal(train, test *data.Sparse, cfg lr.Config) (AppRun, error) {
	nkeys := max(featureKey(train.NumFeatures), featureKey(test.NumFeatures))
	m, err := newLocalLR(train, nkeys, cfg.Rule)
	if err != nil {
		return AppRun{}, err
	}
	rows := make([]int, train.Len())
	for i := range rows {
		rows[i] = i
	}
	steps := (len(rows) + cfg.Batch - 1) / cfg.Batch
	run := AppRun{Side: "local"}
	for e := range cfg.Passes {
		start := time.Now()
		order := slices.Clone(rows)
		// lr's seed for rank 0.
		data.Shuffle(order, cfg.Seed+uint64(e)*7919)
		for s := range steps {
			lo, hi := min(s*len(order)/steps, len(order)), min((s+1)*len(order)/steps, len(order))
			m.step(order[lo:hi])
			run.Examples += int64(hi - lo)
		}
		run.Seconds += time.Since(start).Seconds()
	}
	run.ExamplesPerSecond = float64(run.Examples) / run.Seconds
	run.TestAUC, run.TestLogLoss = m.evaluate(test)
	return run, nil
}

// step is one minibatch: lr's key list, a gather for the pull, lr's
// gradient, and the server's update for the push.
func (m *localLR) step(rows []int) {
	keys := []uint64{0}
	for _, r := range rows {
		rk, _, _ := m.train.Row(r)
		for _, k := range rk {
			keys = append(keys, featureKey(k))
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	w := make([]float32, len(keys))
	for i, k := range keys {
		w[i] = m.model[k]
	}
	grad, _ := m.gradient(rows, keys, w)
	m.apply(keys, grad)
}

// gradient is lr's: the minibatch's mean log-loss gradient on keys, and
// its summed log loss.
func (m *localLR) gradient(rows []int, keys []uint64, w []float32) ([]float32, float64) {
	for i, k := range keys {
		m.pos[k] = int32(i)
	}
	grad := make([]float32, len(keys))
	var loss float64
	for _, r := range rows {
		rk, vals, y := m.train.Row(r)
		z := float64(w[0])
		for j, k := range rk {
			z += float64(w[m.pos[featureKey(k)]]) * float64(vals[j])
		}
		p := sigmoid(z)
		if y > 0 {
			loss -= math.Log(max(p, 1e-15))
		} else {
			loss -= math.Log(max(1-p, 1e-15))
		}
		g := float32(p - float64(y))
		grad[0] += g
		for j, k := range rk {
			grad[m.pos[featureKey(k)]] += g * vals[j]
		}
	}
	scale := 1 / float32(max(len(rows), 1))
	for i := range grad {
		grad[i] *= scale
	}
	return grad, loss
}

// apply updates the model as the server's store does: one Apply per run of
// consecutive keys, and key by key when a run is refused, so that only the
// non-finite keys keep their values.
func (m *localLR) apply(keys []uint64, grad []float32) {
	for i := 0; i < len(keys); {
		j := i + 1
		for j < len(keys) && keys[j] == keys[j-1]+1 {
			j++
		}
		if !m.applyRun(keys[i], keys[j-1]+1, grad[i:j]) {
			for k := i; k < j; k++ {
				m.applyRun(keys[k], keys[k]+1, grad[k:k+1])
			}
		}
		i = j
	}
}

func (m *localLR) applyRun(lo, hi uint64, g []float32) bool {
	for p, plane := range m.state {
		m.st[p] = plane[lo:hi]
	}
	return m.upd.Apply(m.model[lo:hi], m.st, g)
}

// evaluate scores test as lr.Evaluate does.
func (m *localLR) evaluate(test *data.Sparse) (auc, logloss float64) {
	nkeys := uint64(len(m.model))
	probs := make([]float64, test.Len())
	for i := range probs {
		keys, vals, _ := test.Row(i)
		z := float64(m.model[0])
		for j, k := range keys {
			if fk := featureKey(k); fk < nkeys {
				z += float64(m.model[fk]) * float64(vals[j])
			}
		}
		probs[i] = sigmoid(z)
	}
	return metrics.AUC(test.Labels, probs), metrics.LogLoss(test.Labels, probs)
}

func sigmoid(z float64) float64 {
	if z >= 0 {
		return 1 / (1 + math.Exp(-z))
	}
	e := math.Exp(z)
	return e / (1 + e)
}
