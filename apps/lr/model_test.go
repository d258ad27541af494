package lr

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/terrace-ml/terrace/data"
)

func TestLIBLINEARRoundTrip(t *testing.T) {
	m := &Model{W: []float32{-0.5, 0, 1.25, -2, 0.125}} // bias, index 0 (unused), indices 1-3
	var b bytes.Buffer
	if err := m.WriteLIBLINEAR(&b, "1", "-1"); err != nil {
		t.Fatal(err)
	}
	want := "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 3\nbias 1\nw\n1.25 \n-2 \n0.125 \n-0.5 \n"
	if b.String() != want {
		t.Fatalf("model file:\n%s\nwant:\n%s", b.String(), want)
	}
	got, err := ReadLIBLINEAR(&b)
	if err != nil {
		t.Fatal(err)
	}
	for k := range m.W {
		if got.W[k] != m.W[k] {
			t.Fatalf("weights %v, want %v", got.W, m.W)
		}
	}
	// liblinear's own training may list the negative label first: its
	// weights then score the negative class.
	flipped := strings.Replace(want, "label 1 -1", "label -1 1", 1)
	got, err = ReadLIBLINEAR(strings.NewReader(flipped))
	if err != nil {
		t.Fatal(err)
	}
	if got.W[2] != -1.25 || got.W[0] != 0.5 {
		t.Fatalf("flipped weights %v", got.W)
	}
}

func TestLIBLINEARBadFiles(t *testing.T) {
	for name, in := range map[string]string{
		"svm solver": "solver_type L2R_L2LOSS_SVC\nnr_class 2\n",
		"multiclass": "solver_type L2R_LR\nnr_class 3\n",
		"no weights": "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 2\nbias 1\n",
		"short":      "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 2\nbias 1\nw\n1\n",
		"bad weight": "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 1\nbias -1\nw\nx\n",
		"empty":      "",
	} {
		if _, err := ReadLIBLINEAR(strings.NewReader(in)); !errors.Is(err, ErrModelFormat) {
			t.Errorf("%s: %v, want ErrModelFormat", name, err)
		}
	}
}

// TestScaleFoldsIntoModel: a model trained on scaled features and pulled
// with its factors scores raw data as it scored the scaled data.
func TestScaleFoldsIntoModel(t *testing.T) {
	raw, err := data.ParseLIBSVM(strings.NewReader("1 1:200 3:0.05\n-1 1:10 2:3\n"), "t")
	if err != nil {
		t.Fatal(err)
	}
	nkeys := featureKey(raw.NumFeatures)
	s := MaxAbsScale(raw, nkeys)
	scaled, _ := data.ParseLIBSVM(strings.NewReader("1 1:200 3:0.05\n-1 1:10 2:3\n"), "t")
	ApplyScale(scaled, s)
	if _, v, _ := scaled.Row(0); v[0] != 1 || v[1] != 1 {
		t.Fatalf("scaled row 0 %v, want every feature's maximum at 1", v)
	}
	w := []float32{0.1, 0, 2, -1, 3}
	onScaled := &Model{W: w}
	folded := &Model{W: make([]float32, len(w))}
	for k := range w {
		folded.W[k] = w[k] * s[k]
	}
	for i := range raw.Len() {
		if a, b := onScaled.Score(scaled, i), folded.Score(raw, i); a-b > 1e-6 || b-a > 1e-6 {
			t.Fatalf("row %d: %v on scaled data, %v with the folded model on raw data", i, a, b)
		}
	}
}
