package lasso

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/terrace-ml/terrace/data"
)

// TestModelFileRoundTrip: the file WriteLIBLINEAR writes reads back as
// the same model, which predicts what the job's evaluation does.
func TestModelFileRoundTrip(t *testing.T) {
	// Features 1, 2 and 4 of a set whose largest index is 4: the file
	// has a line for feature 3 too, of weight 0.
	w := []float64{0, 0.5, -0.25, 0, 1.0 / 3}
	var b bytes.Buffer
	if err := WriteLIBLINEAR(&b, []uint64{1, 2, 4}, []float64{0.5, -0.25, 1.0 / 3}, 5, 0.75); err != nil {
		t.Fatal(err)
	}
	m, err := ReadLIBLINEAR(bytes.NewReader(b.Bytes()), "m")
	if err != nil {
		t.Fatal(err)
	}
	if m.Intercept != 0.75 || len(m.W) != len(w) {
		t.Fatalf("read back intercept %v, %d weights; want 0.75, %d", m.Intercept, len(m.W), len(w))
	}
	for i := range w {
		if m.W[i] != w[i] {
			t.Errorf("weight %d: %v, want %v", i, m.W[i], w[i])
		}
	}
	path := filepath.Join(t.TempDir(), "d.svm")
	if err := os.WriteFile(path, []byte("1.5 1:2 4:3\n-1 2:1 9:5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := data.ReadRegression(path)
	if err != nil {
		t.Fatal(err)
	}
	// 0.75 + 2*0.5 + 3/3 = 2.75; 0.75 - 0.25 (feature 9 unknown) = 0.5.
	if p0, p1 := m.Predict(d, 0), m.Predict(d, 1); p0 != 2.75 || p1 != 0.5 {
		t.Errorf("predictions %v, %v; want 2.75, 0.5", p0, p1)
	}
	// liblinear-train's files: no bias (bias -1), the dual solver's name.
	m, err = ReadLIBLINEAR(strings.NewReader("solver_type L2R_L2LOSS_SVR_DUAL\nnr_class 2\nnr_feature 2\nbias -1\nw\n0.5 \n-1 \n"), "dual")
	if err != nil || m.Intercept != 0 || m.W[2] != -1 {
		t.Errorf("a model without bias: %+v, %v", m, err)
	}
}

func TestModelFileDamaged(t *testing.T) {
	good := "solver_type L2R_L2LOSS_SVR\nnr_class 2\nnr_feature 2\nbias 1\nw\n0.5 \n-1 \n0.25 \n"
	for name, tc := range map[string]struct{ file, line string }{
		"cut short":      {good[:strings.LastIndex(good, "0.25")], "m:8"},
		"cut mid-line":   {good[:len(good)-3], "m:8"},
		"a bad weight":   {strings.Replace(good, "-1 ", "x ", 1), "m:7"},
		"not finite":     {strings.Replace(good, "-1 ", "NaN ", 1), "m:7"},
		"bytes after":    {good + "7 \n", "m:9"},
		"classification": {strings.Replace(good, "L2R_L2LOSS_SVR", "L2R_LR", 1), "m:1"},
		"no w":           {strings.Replace(good, "w\n", "", 1), "m:5"},
		"two weights":    {strings.Replace(good, "0.5 \n", "0.5 0.5\n", 1), "m:6"},
		// Found by FuzzReadLIBLINEAR (twentieth session): the reader made
		// nr_feature weights at once and ran out of memory.
		"huge nr_feature": {strings.Replace(good, "nr_feature 2", "nr_feature 2000000000", 1), "m:9"},
		"nr_feature 1e11": {strings.Replace(good, "nr_feature 2", "nr_feature 99999999999", 1), "m:3"},
	} {
		_, err := ReadLIBLINEAR(strings.NewReader(tc.file), "m")
		if !errors.Is(err, ErrBadModel) || !strings.Contains(err.Error(), tc.line+":") {
			t.Errorf("%s: %v, want %v at %s", name, err, ErrBadModel, tc.line)
		}
	}
}
