package mlr

import (
	"context"
	"fmt"
	"math"

	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/ps"
)

// mlp is a network of one hidden layer of h ReLU units before the
// softmax over k classes. The input's weights are pulled for the
// minibatch's features only (rows of h, the bias row first); the output
// layer, (h + 1) x k, whole.
type mlp struct {
	hidden, out *ps.Table
	h, k        int
	keyset
	outKeys []uint64
}

func (m *mlp) refused() int64 { return m.hidden.Refused() + m.out.Refused() }

// outputKeys are the output table's keys: hidden unit j key j, the
// classes' biases key h.
func (m *mlp) outputKeys() []uint64 {
	if m.outKeys == nil {
		m.outKeys = make([]uint64, m.h+1)
		for j := range m.outKeys {
			m.outKeys[j] = uint64(j)
		}
	}
	return m.outKeys
}

// forward computes the hidden activations a (h) and the class scores p
// (k) of a row whose features' values fv have their input weights at rows
// places of w1 (the bias row first), under output weights w2 (h+1 rows
// of k, the biases last). Training, its evaluation and a model read back
// (Network) all score with it, so that they agree to the last bit.
func forward(a []float32, p []float64, w1, w2 []float32, h, k int, places []int, fv []float32) {
	copy(a, w1[:h])
	for j, at := range places {
		row, v := w1[at*h:at*h+h], fv[j]
		for u := range h {
			a[u] += v * row[u]
		}
	}
	for u := range a {
		a[u] = max(a[u], 0)
	}
	bias := w2[h*k : h*k+k]
	for c := range k {
		p[c] = float64(bias[c])
	}
	for u, act := range a {
		if act == 0 {
			continue
		}
		row := w2[u*k : u*k+k]
		for c := range k {
			p[c] += float64(act * row[c])
		}
	}
}

// step trains one minibatch and returns its summed log loss.
func (m *mlp) step(ctx context.Context, rows []int) (float64, error) {
	keys := m.gather(rows)
	defer m.release()
	h, k := m.h, m.k
	w1, w2 := make([]float32, len(keys)*h), make([]float32, (h+1)*k)
	if err := ps.All(m.hidden.Pull(keys, w1), m.out.Pull(m.outputKeys(), w2)).Wait(ctx); err != nil {
		return 0, err
	}
	g1, g2 := make([]float32, len(w1)), make([]float32, len(w2))
	a, da := make([]float32, h), make([]float32, h)
	p, d := make([]float64, k), make([]float32, k)
	var places []int
	var loss float64
	scale := 1 / float32(len(rows))
	for _, i := range rows {
		_, fv, _ := m.train.X.Row(i)
		places = m.places(places, i)
		y := int(m.train.Class[i])
		forward(a, p, w1, w2, m.h, m.k, places, fv)
		loss -= math.Log(max(softmax(p)[y], 1e-15))
		for c := range k {
			d[c] = float32(p[c]) * scale
		}
		d[y] -= scale
		// The output layer, and the gradient at the hidden units.
		gb := g2[h*k : h*k+k]
		for c := range k {
			gb[c] += d[c]
		}
		for u, act := range a {
			if act == 0 {
				da[u] = 0 // ReLU: no gradient through an idle unit
				continue
			}
			row, grow := w2[u*k:u*k+k], g2[u*k:u*k+k]
			var s float32
			for c := range k {
				grow[c] += act * d[c]
				s += row[c] * d[c]
			}
			da[u] = s
		}
		// The input layer.
		for u := range h {
			g1[u] += da[u]
		}
		for j, at := range places {
			grow, v := g1[at*h:at*h+h], fv[j]
			for u := range h {
				grow[u] += v * da[u]
			}
		}
	}
	if err := ps.All(m.hidden.Push(keys, g1), m.out.Push(m.outputKeys(), g2)).Wait(ctx); err != nil {
		return 0, err
	}
	return loss, nil
}

// evaluate pulls the network's weights of test's features (and with
// model set, of the training data's, which it writes there) and scores
// test.
func (m *mlp) evaluate(ctx context.Context, test *data.Classes, model string) (acc, logloss float64, err error) {
	keys, at := m.evalKeys(test, model)
	w1, w2 := make([]float32, len(keys)*m.h), make([]float32, (m.h+1)*m.k)
	if err := ps.All(m.hidden.Pull(keys, w1), m.out.Pull(m.outputKeys(), w2)).Wait(ctx); err != nil {
		return 0, 0, fmt.Errorf("pull model: %w", err)
	}
	if model != "" {
		n, err := NewNetwork(keys, w1, w2, m.h, m.k)
		if err != nil {
			return 0, 0, err
		}
		if err := n.Save(model); err != nil {
			return 0, 0, err
		}
	}
	a := make([]float32, m.h)
	var places []int
	acc, logloss = score(test, m.k, func(p []float64, i int) {
		_, fv, _ := test.X.Row(i)
		places = testPlaces(places, test, at, i)
		forward(a, p, w1, w2, m.h, m.k, places, fv)
	})
	return acc, logloss, nil
}
