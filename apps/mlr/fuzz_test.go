package mlr

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// FuzzReadModels: the model files predict takes (a softmax's liblinear
// file, a network's) are read or refused naming the file, never a panic.
func FuzzReadModels(f *testing.F) {
	f.Add([]byte("solver_type L2R_LR\nnr_class 3\nlabel 0 1 2\nnr_feature 1\nbias -1\nw\n0.1 0.2 0.3\n"))
	f.Add([]byte("solver_type L2R_LR\nnr_class 3\nlabel 0 1 2\nnr_feature 4000000000\nbias -1\nw\n"))
	if nn, err := os.ReadFile("testdata/v1.nn.model"); err == nil {
		f.Add(nn)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if _, err := ReadLIBLINEAR(bytes.NewReader(in), "m.model"); err != nil && !strings.Contains(err.Error(), "m.model") {
			t.Fatalf("error does not name the file: %v", err)
		}
		if _, err := ReadNetwork(bytes.NewReader(in), "m.nn"); err != nil && !strings.Contains(err.Error(), "m.nn") {
			t.Fatalf("error does not name the file: %v", err)
		}
	})
}
