package mlr

import (
	"bufio"
	"errors"
	"fmt"
	"github.com/terrace-ml/terrace/internal/modelfile"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/terrace-ml/terrace/data"
)

// WriteLIBLINEAR writes softmax regression's weights w (key-major, k
// classes a key) of keys (increasing, the biases' key 0 first; LIBSVM
// index i is key i+1) as a liblinear multi-class model file (solver
// L2R_LR, labels 0 to k-1, bias 1): liblinear's predict takes the class
// of the largest w_c . x + b_c, which is the softmax's most probable
// class, so it predicts what this model does. Its probabilities (-b 1)
// are liblinear's one-vs-rest ones, not the softmax's. Of two classes
// liblinear keeps one column, the decision value for the first label
// (class 0 where it is positive): here w_0 - w_1, whose sign is which
// score is larger. Two columns, as for more classes, were read by
// liblinear one value a row, misaligned. liblinear's format is dense: the
// file has a row for every index from 1 to the largest key's, and an
// index keys lack weighs 0 (the table's initial value, which it holds).
func WriteLIBLINEAR(out io.Writer, keys []uint64, w []float32, k int) error {
	if len(keys) == 0 || keys[0] != 0 || len(w) != len(keys)*k {
		return fmt.Errorf("mlr model: %d weights for %d keys (the biases' first) of %d classes", len(w), len(keys), k)
	}
	bw := bufio.NewWriter(out)
	nf := max(keys[len(keys)-1], 1) - 1 // keys 2.. are LIBSVM indices 1..; key 1 is index 0, which LIBSVM does not use
	fmt.Fprintf(bw, "solver_type L2R_LR\nnr_class %d\nlabel", k)
	for c := range k {
		fmt.Fprintf(bw, " %d", c)
	}
	fmt.Fprintf(bw, "\nnr_feature %d\nbias 1\nw\n", nf)
	zero := make([]float32, k)
	row := func(v []float32) {
		if k == 2 {
			fmt.Fprintf(bw, "%.9g \n", v[0]-v[1])
			return
		}
		for c := range k {
			fmt.Fprintf(bw, "%.9g ", v[c])
		}
		bw.WriteByte('\n')
	}
	i := 0
	for key := uint64(2); key <= nf+1; key++ {
		for i < len(keys) && keys[i] < key {
			i++
		}
		if i < len(keys) && keys[i] == key {
			row(w[i*k : i*k+k])
		} else {
			row(zero)
		}
	}
	row(w[:k])
	return bw.Flush()
}

// SaveLIBLINEAR writes WriteLIBLINEAR's file to path.
func SaveLIBLINEAR(path string, keys []uint64, w []float32, k int) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	if err := WriteLIBLINEAR(f, keys, w, k); err != nil {
		f.Close()
		return fmt.Errorf("model %s: %w", path, err)
	}
	return f.Close()
}

// ErrModelTooWide refuses --model, a liblinear file of a line per index,
// for data whose indices reach beyond modelfile.MaxModelFeatures (2^27),
// before training; it is lasso.ErrModelTooWide.
var ErrModelTooWide = modelfile.ErrModelTooWide

// Softmax is softmax regression's model read back from its liblinear
// file (ReadLIBLINEAR), its weights laid out as the mlr.weights table
// holds them (NKeys rows of Classes: key 0 the biases, feature f key
// f+1), so that it scores as the job's own evaluation does.
type Softmax struct {
	Classes int
	NKeys   uint64
	W       []float32
}

// ErrLIBLINEAR is returned for a file that is not a whole liblinear
// L2R_LR model of three or more classes, labelled 0 to C-1.
var ErrLIBLINEAR = errors.New("not a whole liblinear multi-class logistic regression model")

// ReadLIBLINEAR reads a liblinear L2R_LR model file of three or more
// classes, as WriteLIBLINEAR or liblinear's train -s 0 writes it, named
// name in its errors. Its labels must be 0 to C-1 (the class numbers
// of mlr's data), in any order: column c's weights are class label[c]'s.
// LIBSVM index 0 has no row in the file, so its weights read as 0. Two
// classes are lr's reader's (apps/lr), whose one column the file then has.
func ReadLIBLINEAR(r io.Reader, name string) (*Softmax, error) {
	lr := modelfile.NewReader(r, "mlr model", name, ErrLIBLINEAR)
	labels, nf, bias, err := readLIBLINEARHeader(lr)
	if err != nil {
		return nil, err
	}
	k, rows := len(labels), nf
	if bias >= 0 {
		rows++
	}
	// The weights grow as rows are read: a damaged nr_feature fails at the
	// row the file lacks, not in an allocation.
	var w []float32
	for i := range rows {
		f, err := lr.Line()
		if err != nil {
			return nil, err
		}
		if len(f) != k {
			return nil, lr.Errorf("weight row %d has %d values, want %d", i+1, len(f), k)
		}
		if w, err = lr.Floats(w, f); err != nil {
			return nil, err
		}
	}
	if err := lr.End(fmt.Sprintf("the %d weight rows", rows)); err != nil {
		return nil, err
	}
	// File row i is LIBSVM index i+1 (key i+2); the bias row, last, key 0.
	m := &Softmax{Classes: k, NKeys: uint64(nf) + 2}
	m.W = make([]float32, int(m.NKeys)*k)
	put := func(key, row int, scale float32) {
		for c, l := range labels {
			m.W[key*k+l] = w[row*k+c] * scale
		}
	}
	for i := range nf {
		put(i+2, i, 1)
	}
	if bias >= 0 {
		put(0, nf, float32(bias))
	}
	return m, nil
}

// readLIBLINEARHeader reads a liblinear model's header up to its "w"
// line: each column's class, the features and the bias (-1: none).
func readLIBLINEARHeader(lr *modelfile.Reader) (labels []int, nf int, bias float64, err error) {
	nf, bias, k := -1, -1, 0
	for {
		f, err := lr.Line()
		if err != nil {
			return nil, 0, 0, err
		}
		if len(f) == 1 && f[0] == "w" {
			break
		}
		if len(f) < 2 {
			return nil, 0, 0, lr.Errorf("%q: want a header line or \"w\"", strings.Join(f, " "))
		}
		switch f[0] {
		case "solver_type":
			if f[1] != "L2R_LR" {
				return nil, 0, 0, lr.Errorf("solver %s: want L2R_LR (logistic regression)", f[1])
			}
		case "nr_class":
			if k, err = strconv.Atoi(f[1]); err != nil || k < 3 || k > data.MaxClasses {
				return nil, 0, 0, lr.Errorf("nr_class %s: want 3 to %d (a model of two classes is lr's)", f[1], data.MaxClasses)
			}
		case "label":
			seen := map[int]bool{}
			for _, s := range f[1:] {
				l, err := strconv.Atoi(s)
				if err != nil || l < 0 || l >= len(f)-1 || seen[l] {
					return nil, 0, 0, lr.Errorf("labels %v: want 0 to %d, each once", f[1:], len(f)-2)
				}
				seen[l] = true
				labels = append(labels, l)
			}
		case "nr_feature":
			if nf, err = lr.Features(f[1]); err != nil {
				return nil, 0, 0, err
			}
		case "bias":
			if bias, err = lr.Bias(f[1]); err != nil {
				return nil, 0, 0, err
			}
		}
	}
	if k == 0 || len(labels) != k || nf < 0 {
		return nil, 0, 0, lr.Errorf("\"w\" before nr_class, %d labels and nr_feature", k)
	}
	return labels, nf, bias, nil
}

// forward writes a row's class scores into p, leaving out features the
// model has no row for.
func (m *Softmax) forward(s *rowScratch, p []float64, fk []uint64, fv []float32) {
	s.places, s.vals = s.places[:0], s.vals[:0]
	for j, f := range fk {
		if key := featureKey(f); key < m.NKeys {
			s.places = append(s.places, int(key))
			s.vals = append(s.vals, fv[j])
		}
	}
	logits(p, m.W, s.places, s.vals, m.Classes)
}

// Evaluate scores d as the training's evaluation does: the accuracy of
// the most probable class, and the mean log loss.
func (m *Softmax) Evaluate(d *data.Classes) (acc, logloss float64) {
	var s rowScratch
	return score(d, m.Classes, func(p []float64, i int) { fk, fv, _ := d.X.Row(i); m.forward(&s, p, fk, fv) })
}

// Predictions calls each with every row of d's most probable class and
// its class probabilities (p, reused for the next row), in order.
func (m *Softmax) Predictions(d *data.Classes, each func(class int, p []float64)) {
	var s rowScratch
	predictions(d, m.Classes, func(p []float64, i int) { fk, fv, _ := d.X.Row(i); m.forward(&s, p, fk, fv) }, each)
}
