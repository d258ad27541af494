package lr

import (
	"bytes"
	"errors"
	"slices"
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
	got, err := ReadLIBLINEAR(&b, "m")
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
	got, err = ReadLIBLINEAR(strings.NewReader(flipped), "m")
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
		// Taken before (seventeenth session's walkthrough): a header that
		// does not describe its weights scored with them shifted, a NaN
		// weight scored NaN, and a huge nr_feature panicked allocating.
		"nr_feature below the weights": "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 1\nbias 1\nw\n1\n2\n3\n",
		"no bias line":                 "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 2\nw\n1\n2\n3\n",
		"NaN weight":                   "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 1\nbias 1\nw\nNaN\n1\n",
		"infinite weight":              "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 1\nbias 1\nw\n+Inf\n1\n",
		"huge nr_feature":              "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 100000000000\nbias 1\nw\n1\n",
		// Found by FuzzReadLIBLINEAR (twentieth session): a key with no
		// value panicked with an index out of range.
		"nr_feature alone": "nr_feature\n",
		"bias alone":       "solver_type L2R_LR\nbias\n",
		"NaN bias":         "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 1\nbias NaN\nw\n1\n",
	} {
		if _, err := ReadLIBLINEAR(strings.NewReader(in), "m"); !errors.Is(err, ErrModelFormat) {
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
	s := MaxAbsScale(raw)
	scaled, _ := data.ParseLIBSVM(strings.NewReader("1 1:200 3:0.05\n-1 1:10 2:3\n"), "t")
	s.Apply(scaled)
	if _, v, _ := scaled.Row(0); v[0] != 1 || v[1] != 1 {
		t.Fatalf("scaled row 0 %v, want every feature's maximum at 1", v)
	}
	w := []float32{0.1, 0, 2, -1, 3}
	onScaled := &Model{W: w}
	folded := NewModel(slices.Clone(w), s)
	for i := range raw.Len() {
		if a, b := onScaled.Score(scaled, i), folded.Score(raw, i); a-b > 1e-6 || b-a > 1e-6 {
			t.Fatalf("row %d: %v on scaled data, %v with the folded model on raw data", i, a, b)
		}
	}
}

// TestScaleSparseIndices: the factors are kept for the features the
// training data has, whatever its indices: at 10^12 an array up to the
// largest index was 4 TB a worker. A test feature training lacks keeps
// its value; folding scales the keys a model has and passes over the
// others.
func TestScaleSparseIndices(t *testing.T) {
	train, err := data.ParseLIBSVM(strings.NewReader("1 3:4 1000000000000:-0.5\n-1 3:2 7:0\n"), "train")
	if err != nil {
		t.Fatal(err)
	}
	s := MaxAbsScale(train)
	s.Apply(train)
	if !slices.Equal(train.Vals, []float32{1, -1, 0.5, 0}) {
		t.Errorf("scaled training values %v, want [1 -1 0.5 0]", train.Vals)
	}
	test, err := data.ParseLIBSVM(strings.NewReader("1 2:5 3:8 1000000000000:1 1000000000001:3\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	s.Apply(test)
	if !slices.Equal(test.Vals, []float32{5, 2, 2, 3}) {
		t.Errorf("scaled test values %v, want [5 2 2 3] (features 2 and 10^12+1 unseen in training)", test.Vals)
	}
	w := []float32{1, 1, 1, 1, 1, 1, 1, 1}
	s.Fold(w)
	if !slices.Equal(w, []float32{1, 1, 1, 1, 0.25, 1, 1, 1}) {
		t.Errorf("folded weights %v, want feature 3's (key 4) by 0.25, the rest as they were", w)
	}
}
