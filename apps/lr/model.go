package lr

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/internal/modelfile"
	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/metrics"
	"github.com/terrace-ml/terrace/ps"
)

// Model is a trained model on raw (unscaled) features: W[0] is the bias,
// W[f+1] the weight of feature f (LIBSVM index f).
type Model struct {
	W []float32
}

// ErrModelFormat is returned for a model file that is not a binary L2R_LR
// liblinear model with a bias.
var ErrModelFormat = errors.New("not a liblinear binary logistic regression model")

// PullModel pulls the weights from the servers and folds the feature
// scaling into them (w_raw = w_scaled * s), so that the model scores raw
// data.
func PullModel(ctx context.Context, tbl *ps.Table, nkeys uint64, scale Scale) (*Model, error) {
	w := make([]float32, nkeys)
	if err := tbl.PullRange(keyspace.Range{Lo: 0, Hi: nkeys}, w).Wait(ctx); err != nil {
		return nil, fmt.Errorf("lr: pull model: %w", err)
	}
	return NewModel(w, scale), nil
}

// NewModel makes the model of the weights w, by key, as the servers hold
// them (read from a checkpoint, say), folding the feature scaling into
// them; it takes w over.
func NewModel(w []float32, scale Scale) *Model {
	scale.Fold(w)
	return &Model{W: w}
}

// Score returns the probability of label 1 for row i of d.
func (m *Model) Score(d *data.Sparse, i int) float64 {
	keys, vals, _ := d.Row(i)
	z := float64(m.W[0])
	for j, k := range keys {
		if fk := featureKey(k); fk < uint64(len(m.W)) {
			z += float64(m.W[fk]) * float64(vals[j])
		}
	}
	return sigmoid(z)
}

// Evaluate scores d: accuracy (threshold 0.5), log loss and AUC.
func (m *Model) Evaluate(d *data.Sparse) (acc, logloss, auc float64) {
	p := make([]float64, d.Len())
	for i := range p {
		p[i] = m.Score(d, i)
	}
	return metrics.Accuracy(d.Labels, p), metrics.LogLoss(d.Labels, p), metrics.AUC(d.Labels, p)
}

// WriteLIBLINEAR writes m as a liblinear model file (solver L2R_LR, two
// classes, bias 1), which liblinear's predict reads: its decision value
// w·x + b is Terrace's logit, and it predicts the first label when that
// is positive. Labels are written as pos and neg (LIBSVM files use 1 and
// -1, or 1 and 0).
func (m *Model) WriteLIBLINEAR(w io.Writer, pos, neg string) error {
	bw := bufio.NewWriter(w)
	nf := max(len(m.W)-2, 0) // keys 2.. are LIBSVM indices 1..; key 1 is index 0, which LIBSVM does not use
	fmt.Fprintf(bw, "solver_type L2R_LR\nnr_class 2\nlabel %s %s\nnr_feature %d\nbias 1\nw\n", pos, neg, nf)
	for idx := 1; idx <= nf; idx++ {
		fmt.Fprintf(bw, "%.9g \n", m.W[featureKey(uint64(idx))])
	}
	fmt.Fprintf(bw, "%.9g \n", m.W[0])
	return bw.Flush()
}

// SaveLIBLINEAR writes m to path (see WriteLIBLINEAR).
func (m *Model) SaveLIBLINEAR(path, pos, neg string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("lr: model: %w", err)
	}
	if err := m.WriteLIBLINEAR(f, pos, neg); err != nil {
		f.Close()
		return fmt.Errorf("lr: model %s: %w", path, err)
	}
	return f.Close()
}

// ReadLIBLINEAR reads a binary L2R_LR model (as written by WriteLIBLINEAR
// or by liblinear's train -s 0), named name in its errors, with the line. A
// model whose first label is the negative class (0 or -1) has its weights
// negated; the bias feature, when the file has one (bias >= 0), is W[0]'s.
func ReadLIBLINEAR(r io.Reader, name string) (*Model, error) {
	lr := modelfile.NewReader(r, "lr model", name, ErrModelFormat)
	nf, bias := -1, -1.0
	solver, classes, flip := false, false, false
	for {
		f, err := lr.Line()
		if err != nil {
			return nil, err
		}
		if len(f) == 0 {
			continue
		}
		if len(f) == 1 && f[0] == "w" {
			break
		}
		switch {
		case f[0] == "solver_type":
			if len(f) != 2 || f[1] != "L2R_LR" {
				return nil, lr.Errorf("solver %v: want L2R_LR (logistic regression)", f[1:])
			}
			solver = true
		case f[0] == "nr_class":
			if len(f) != 2 || f[1] != "2" {
				return nil, lr.Errorf("%v classes: want 2 (a model of more is mlr's)", f[1:])
			}
			classes = true
		case f[0] == "label":
			if len(f) != 3 {
				return nil, lr.Errorf("labels %v: want two", f[1:])
			}
			first, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return nil, lr.Errorf("label %q is not a number", f[1])
			}
			flip = first <= 0
		case f[0] == "nr_feature" && len(f) == 2:
			if nf, err = lr.Features(f[1]); err != nil {
				return nil, err
			}
		case f[0] == "bias" && len(f) == 2:
			if bias, err = lr.Bias(f[1]); err != nil {
				return nil, err
			}
		default:
			return nil, lr.Errorf("want a header line (solver_type, nr_class, label, nr_feature, bias) or w, got %q", strings.Join(f, " "))
		}
	}
	if !solver || !classes || nf < 0 {
		return nil, lr.Errorf("the header lacks solver_type, nr_class or nr_feature")
	}
	n := nf
	if bias >= 0 {
		n++
	}
	// Grown as the weights come, not n at once: a corrupt nr_feature of
	// 1e11 panicked allocating.
	ws := make([]float32, 0, min(n, 1<<20))
	for len(ws) < n {
		f, err := lr.Line()
		if err != nil {
			return nil, err
		}
		if len(f) != 1 {
			return nil, lr.Errorf("want one weight, got %d fields", len(f))
		}
		// A NaN weight scored every example NaN (logloss NaN, AUC 0.66).
		if ws, err = lr.Floats(ws, f); err != nil {
			return nil, err
		}
		if flip {
			ws[len(ws)-1] = -ws[len(ws)-1]
		}
	}
	// Weights beyond nr_feature (and the bias) mean the header does not
	// describe them: a smaller nr_feature, or no bias line, scored with
	// the weights shifted (a9a at 0.55 accuracy, without a word).
	if err := lr.End(fmt.Sprintf("the %d weights that nr_feature %d and bias %g make", n, nf, bias)); err != nil {
		return nil, err
	}
	m := &Model{W: make([]float32, nf+2)}
	for idx := 1; idx <= nf; idx++ {
		m.W[featureKey(uint64(idx))] = ws[idx-1]
	}
	if bias >= 0 {
		m.W[0] = ws[nf] * float32(bias)
	}
	return m, nil
}

// saveModel pulls the model, scores test (scaled like the training data)
// with it, and writes it with the scaling folded in.
func saveModel(ctx context.Context, tbl *ps.Table, nkeys uint64, scale Scale, test *data.Sparse, cfg Config) (acc, logloss, auc float64, err error) {
	m, err := PullModel(ctx, tbl, nkeys, Scale{})
	if err != nil {
		return 0, 0, 0, err
	}
	acc, logloss, auc = evaluateWeights(m.W, test, nkeys)
	scale.Fold(m.W)
	neg := cfg.NegLabel
	if neg == "" {
		neg = "-1"
	}
	return acc, logloss, auc, m.SaveLIBLINEAR(cfg.Model, "1", neg)
}
