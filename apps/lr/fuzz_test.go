package lr

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzReadLIBLINEAR: a model file from anywhere (predict takes liblinear's
// own) is read or refused, never a panic or a model of another size.
func FuzzReadLIBLINEAR(f *testing.F) {
	f.Add([]byte("solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 2\nbias 1\nw\n0.5\n-0.25\n0.1\n"))
	f.Add([]byte("solver_type L2R_LR\nnr_class 2\nlabel 0 1\nnr_feature 0\nbias 1\nw\n0.1\n"))
	f.Add([]byte("solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 99999999999\nbias 1\nw\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		if _, err := ReadLIBLINEAR(bytes.NewReader(in), "m.model"); err != nil && !strings.Contains(err.Error(), "m.model") {
			t.Fatalf("error does not name the file: %v", err)
		}
	})
}
