package mlr

import (
	"bufio"
	"fmt"
	"io"
	"os"
)

// WriteLIBLINEAR writes softmax regression's weights w (key-major, k
// classes a key: key 0 the biases, LIBSVM index i key i+1, nkeys keys) as
// a liblinear multi-class model file (solver L2R_LR, labels 0 to k-1,
// bias 1): liblinear's predict takes the class of the largest w_c . x + b_c,
// which is the softmax's most probable class, so it predicts what this
// model does. Its probabilities (-b 1) are liblinear's one-vs-rest ones,
// not the softmax's. Of two classes liblinear keeps one column, the
// decision value for the first label (class 0 where it is positive):
// here w_0 - w_1, whose sign is which score is larger. Two columns, as
// for more classes, were read by liblinear one value a row, misaligned.
func WriteLIBLINEAR(out io.Writer, w []float32, nkeys uint64, k int) error {
	bw := bufio.NewWriter(out)
	nf := max(int(nkeys)-2, 0) // keys 2.. are LIBSVM indices 1..; key 1 is index 0, which LIBSVM does not use
	fmt.Fprintf(bw, "solver_type L2R_LR\nnr_class %d\nlabel", k)
	for c := range k {
		fmt.Fprintf(bw, " %d", c)
	}
	fmt.Fprintf(bw, "\nnr_feature %d\nbias 1\nw\n", nf)
	row := func(key int) {
		if k == 2 {
			fmt.Fprintf(bw, "%.9g \n", w[key*2]-w[key*2+1])
			return
		}
		for c := range k {
			fmt.Fprintf(bw, "%.9g ", w[key*k+c])
		}
		bw.WriteByte('\n')
	}
	for idx := 1; idx <= nf; idx++ {
		row(idx + 1)
	}
	row(0)
	return bw.Flush()
}

// SaveLIBLINEAR writes WriteLIBLINEAR's file to path.
func SaveLIBLINEAR(path string, w []float32, nkeys uint64, k int) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	if err := WriteLIBLINEAR(f, w, nkeys, k); err != nil {
		f.Close()
		return fmt.Errorf("model %s: %w", path, err)
	}
	return f.Close()
}
