package lasso

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/internal/modelfile"
)

// WriteLIBLINEAR writes the weights w of features keys (increasing
// LIBSVM indices), of a training set whose largest index is features-1,
// and the intercept as a liblinear regression model file (the format of
// its L2R_L2LOSS_SVR models, bias 1 with the intercept as its weight):
// liblinear's predict then predicts intercept + w . x, as this model
// does. The file has a line for every index from 1 (liblinear's format is
// dense); features the data lacks weigh 0, and index 0, which liblinear
// has not, is left out.
func WriteLIBLINEAR(out io.Writer, keys []uint64, w []float64, features uint64, intercept float64) error {
	bw := bufio.NewWriter(out)
	nf := uint64(0)
	if features > 1 {
		nf = features - 1
	}
	fmt.Fprintf(bw, "solver_type L2R_L2LOSS_SVR\nnr_class 2\nnr_feature %d\nbias 1\nw\n", nf)
	j := 0
	for idx := uint64(1); idx <= nf; idx++ {
		for j < len(keys) && keys[j] < idx {
			j++
		}
		v := 0.0
		if j < len(keys) && keys[j] == idx {
			v = w[j]
		}
		fmt.Fprintf(bw, "%.17g \n", v)
	}
	fmt.Fprintf(bw, "%.17g \n", intercept)
	return bw.Flush()
}

// SaveLIBLINEAR writes WriteLIBLINEAR's file to path.
func SaveLIBLINEAR(path string, keys []uint64, w []float64, features uint64, intercept float64) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	if err := WriteLIBLINEAR(f, keys, w, features, intercept); err != nil {
		f.Close()
		return fmt.Errorf("model %s: %w", path, err)
	}
	return f.Close()
}

// MaxModelFeatures bounds the largest feature index a model file is
// written for (modelfile.MaxModelFeatures, mlr's too).
const MaxModelFeatures = modelfile.MaxModelFeatures

// ErrModelTooWide refuses a model file for data whose indices reach
// beyond MaxModelFeatures, before training; mlr.ErrModelTooWide is the
// same error.
var ErrModelTooWide = modelfile.ErrModelTooWide

// ErrBadModel is a model file ReadLIBLINEAR refuses: not a liblinear
// regression model, or damaged.
var ErrBadModel = errors.New("not a liblinear regression model file")

// Model is a linear regression model read back from a liblinear file:
// intercept + w . x.
type Model struct {
	W         []float64 // by LIBSVM index; W[0] unused
	Intercept float64
}

// IsRegression reports whether a liblinear model file's header (its first
// lines) names a regression solver: L2R_L2LOSS_SVR, L2R_L2LOSS_SVR_DUAL or
// L2R_L1LOSS_SVR_DUAL.
func IsRegression(head []byte) bool {
	solver, ok := modelfile.HeaderValue(head, "solver_type")
	return ok && strings.Contains(solver, "SVR")
}

// ReadLIBLINEAR reads a liblinear regression model file (name in errors,
// with the line): lasso's own or liblinear-train's (-s 11, 12 or 13). The
// bias feature, when the file has one (bias >= 0), is the intercept's:
// bias times its weight.
func ReadLIBLINEAR(r io.Reader, name string) (*Model, error) {
	lr := modelfile.NewReader(r, "lasso model", name, ErrBadModel)
	nf, bias := -1, -1.0
	solver := ""
	for {
		f, err := lr.Line()
		if err != nil {
			return nil, err
		}
		if len(f) == 1 && f[0] == "w" {
			break
		}
		if len(f) != 2 {
			return nil, lr.Errorf("want a header line (solver_type, nr_class, nr_feature, bias) or w, got %q", strings.Join(f, " "))
		}
		switch f[0] {
		case "solver_type":
			if solver = f[1]; !strings.Contains(solver, "SVR") {
				return nil, lr.Errorf("solver %s is not a regression solver", solver)
			}
		case "nr_class":
			// liblinear writes 2 for its regression models.
		case "nr_feature":
			if nf, err = lr.Features(f[1]); err != nil {
				return nil, err
			}
		case "bias":
			if bias, err = lr.Bias(f[1]); err != nil {
				return nil, err
			}
		default:
			return nil, lr.Errorf("unknown header line %q", strings.Join(f, " "))
		}
	}
	if solver == "" || nf < 0 {
		return nil, lr.Errorf("the header lacks solver_type or nr_feature")
	}
	weight := func() (float64, error) {
		f, err := lr.Line()
		if err != nil {
			return 0, err
		}
		if len(f) != 1 {
			return 0, lr.Errorf("want one weight, got %d fields", len(f))
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, lr.Errorf("weight %q", f[0])
		}
		return v, nil
	}
	// Grown as the weights come, not nf+1 at once: a damaged nr_feature
	// of 1e11 ran out of memory before the first weight was read.
	m := &Model{W: make([]float64, 1, min(nf+1, 1<<20))}
	for idx := 1; idx <= nf; idx++ {
		v, err := weight()
		if err != nil {
			return nil, err
		}
		m.W = append(m.W, v)
	}
	if bias >= 0 {
		v, err := weight()
		if err != nil {
			return nil, err
		}
		m.Intercept = bias * v
	}
	if err := lr.End("the last weight"); err != nil {
		return nil, err
	}
	return m, nil
}

// Predict is the model's prediction for row i of d.
func (m *Model) Predict(d *data.Sparse, i int) float64 {
	keys, vals, _ := d.Row(i)
	return predict(keys, vals, func(f uint64) float64 {
		if f < uint64(len(m.W)) {
			return m.W[f]
		}
		return 0
	}, m.Intercept)
}

// RMSE is the root mean squared error of the model's predictions of d's
// targets.
func (m *Model) RMSE(d *data.Sparse) float64 {
	var sq float64
	for i := range d.Len() {
		_, _, y := d.Row(i)
		e := float64(y) - m.Predict(d, i)
		sq += e * e
	}
	return math.Sqrt(sq / float64(max(d.Len(), 1)))
}

// predict is intercept + w . x, feature f weighing weight(f) (0 for one
// the model does not know), the job's evaluation and the file's alike.
func predict(keys []uint64, vals []float32, weight func(f uint64) float64, intercept float64) float64 {
	pred := intercept
	for t, f := range keys {
		pred += float64(vals[t]) * weight(f)
	}
	return pred
}
