package mlr

import (
	"strings"
	"testing"
)

// TestWriteLIBLINEAR: rows are LIBSVM indices 1 to nkeys-2, then the
// biases (key 0); of three classes a column each, of two the one column
// liblinear reads for two classes (class 0's score minus class 1's),
// which it misaligned when given two.
func TestWriteLIBLINEAR(t *testing.T) {
	for _, c := range []struct {
		k    int
		w    []float32
		want string
	}{
		{3, []float32{1, 2, 3, 0, 0, 0, 4, 5, 6, 7, 8, 9}, "solver_type L2R_LR\nnr_class 3\nlabel 0 1 2\nnr_feature 2\nbias 1\nw\n4 5 6 \n7 8 9 \n1 2 3 \n"},
		{2, []float32{1, 0.5, 0, 0, 4, 5, -7, 8}, "solver_type L2R_LR\nnr_class 2\nlabel 0 1\nnr_feature 2\nbias 1\nw\n-1 \n-15 \n0.5 \n"},
	} {
		var b strings.Builder
		if err := WriteLIBLINEAR(&b, c.w, 4, c.k); err != nil {
			t.Fatal(err)
		}
		if b.String() != c.want {
			t.Errorf("%d classes:\n%s\nwant:\n%s", c.k, b.String(), c.want)
		}
	}
}
