package lasso

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzReadLIBLINEAR: a regression model file from anywhere (predict takes
// liblinear's own) is read or refused naming the file, never a panic.
func FuzzReadLIBLINEAR(f *testing.F) {
	f.Add([]byte("solver_type L2R_L2LOSS_SVR\nnr_class 2\nnr_feature 2\nbias 1\nw\n0.5\n-0.25\n0.1\n"))
	f.Add([]byte("solver_type L2R_L1LOSS_SVR_DUAL\nnr_feature 99999999999\nbias -1\nw\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		if _, err := ReadLIBLINEAR(bytes.NewReader(in), "m.model"); err != nil && !strings.Contains(err.Error(), "m.model") {
			t.Fatalf("error does not name the file: %v", err)
		}
	})
}
