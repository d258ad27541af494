package mlr

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestWriteLIBLINEAR: rows are LIBSVM indices 1 to the largest key's,
// then the biases (key 0); an index the keys lack weighs 0; of three
// classes a column each, of two the one column liblinear reads for two
// classes (class 0's score minus class 1's), which it misaligned when
// given two.
func TestWriteLIBLINEAR(t *testing.T) {
	for _, c := range []struct {
		k    int
		keys []uint64
		w    []float32
		want string
	}{
		{3, []uint64{0, 1, 2, 3}, []float32{1, 2, 3, 0, 0, 0, 4, 5, 6, 7, 8, 9}, "solver_type L2R_LR\nnr_class 3\nlabel 0 1 2\nnr_feature 2\nbias 1\nw\n4 5 6 \n7 8 9 \n1 2 3 \n"},
		{2, []uint64{0, 1, 2, 3}, []float32{1, 0.5, 0, 0, 4, 5, -7, 8}, "solver_type L2R_LR\nnr_class 2\nlabel 0 1\nnr_feature 2\nbias 1\nw\n-1 \n-15 \n0.5 \n"},
		{3, []uint64{0, 3, 5}, []float32{1, 2, 3, 4, 5, 6, 7, 8, 9}, "solver_type L2R_LR\nnr_class 3\nlabel 0 1 2\nnr_feature 4\nbias 1\nw\n0 0 0 \n4 5 6 \n0 0 0 \n7 8 9 \n1 2 3 \n"},
		{2, []uint64{0}, []float32{1, 0.5}, "solver_type L2R_LR\nnr_class 2\nlabel 0 1\nnr_feature 0\nbias 1\nw\n0.5 \n"},
	} {
		var b strings.Builder
		if err := WriteLIBLINEAR(&b, c.keys, c.w, c.k); err != nil {
			t.Fatal(err)
		}
		if b.String() != c.want {
			t.Errorf("%d classes:\n%s\nwant:\n%s", c.k, b.String(), c.want)
		}
	}
}

// TestReadLIBLINEAR: WriteLIBLINEAR's file of three classes reads back
// as the weights written (LIBSVM index 0's, which it has no row for, as
// 0); liblinear's own label order is followed; a damaged file is refused
// at its line.
func TestReadLIBLINEAR(t *testing.T) {
	w := []float32{1, 2, 3, 9, 9, 9, 4, 5, 6, 7, 8, 0.125}
	var b strings.Builder
	if err := WriteLIBLINEAR(&b, []uint64{0, 1, 2, 3}, w, 3); err != nil {
		t.Fatal(err)
	}
	good := b.String()
	m, err := ReadLIBLINEAR(strings.NewReader(good), "m")
	if err != nil {
		t.Fatal(err)
	}
	if want := []float32{1, 2, 3, 0, 0, 0, 4, 5, 6, 7, 8, 0.125}; m.Classes != 3 || m.NKeys != 4 || !slices.Equal(m.W, want) {
		t.Fatalf("read back %+v, want 3 classes, 4 keys, %v", m, want)
	}
	// liblinear labels columns in the order classes first appear.
	m, err = ReadLIBLINEAR(strings.NewReader(strings.Replace(good, "label 0 1 2", "label 2 0 1", 1)), "m")
	if err != nil || !slices.Equal(m.W[:3], []float32{2, 3, 1}) {
		t.Fatalf("labels 2 0 1: biases %v, %v; want [2 3 1]", m.W[:3], err)
	}
	for _, c := range []struct{ name, file, at string }{
		{"cut mid-row", good[:len(good)-4], "m:9:"},
		{"cut after a row", good[:strings.LastIndex(good[:len(good)-1], "\n")+1], "m:9:"},
		{"two classes", strings.Replace(good, "nr_class 3", "nr_class 2", 1), "m:2:"},
		{"another solver", strings.Replace(good, "L2R_LR", "L2R_L2LOSS_SVC", 1), "m:1:"},
		{"a label twice", strings.Replace(good, "label 0 1 2", "label 0 1 1", 1), "m:3:"},
		{"a row short", strings.Replace(good, "4 5 6 ", "4 5 ", 1), "m:7:"},
		{"not a number", strings.Replace(good, "7 8", "7 x", 1), "m:8:"},
		{"bytes after", good + "1 2 3 \n", "m:10:"},
		{"NaN bias", strings.Replace(good, "bias 1", "bias NaN", 1), "m:5:"},
	} {
		_, err := ReadLIBLINEAR(strings.NewReader(c.file), "m")
		if !errors.Is(err, ErrLIBLINEAR) || !strings.Contains(err.Error(), c.at) {
			t.Errorf("%s: %v; want %v at %s", c.name, err, ErrLIBLINEAR, c.at)
		}
	}
}
