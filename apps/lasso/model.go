package lasso

import (
	"bufio"
	"fmt"
	"io"
	"os"
)

// WriteLIBLINEAR writes the weights w (by LIBSVM index, index 0 unused)
// and the intercept as a liblinear regression model file (the format of
// its L2R_L2LOSS_SVR models, bias 1 with the intercept as its weight):
// liblinear's predict then predicts intercept + w . x, as this model does.
func WriteLIBLINEAR(out io.Writer, w []float64, intercept float64) error {
	bw := bufio.NewWriter(out)
	nf := max(len(w)-1, 0)
	fmt.Fprintf(bw, "solver_type L2R_L2LOSS_SVR\nnr_class 2\nnr_feature %d\nbias 1\nw\n", nf)
	for idx := 1; idx <= nf; idx++ {
		fmt.Fprintf(bw, "%.17g \n", w[idx])
	}
	fmt.Fprintf(bw, "%.17g \n", intercept)
	return bw.Flush()
}

// SaveLIBLINEAR writes WriteLIBLINEAR's file to path.
func SaveLIBLINEAR(path string, w []float64, intercept float64) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	if err := WriteLIBLINEAR(f, w, intercept); err != nil {
		f.Close()
		return fmt.Errorf("model %s: %w", path, err)
	}
	return f.Close()
}
