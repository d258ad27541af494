package mlr

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/terrace-ml/terrace/data"
)

// testNetwork is a network of 4 features (0, 2, 7 and 10^12), 2 hidden
// units and 3 classes whose weights tell each of its rows apart.
func testNetwork(t *testing.T) *Network {
	t.Helper()
	w1 := []float32{0.5, -0.25, 1, 0, 0, 1, 1e-7, -3.4028235e38, 0.1, 2}
	w2 := []float32{1, -1, 0.3, -2, 2, 0.7, 0.125, 0, -0.125}
	n, err := NewNetwork([]uint64{0, 1, 3, 8, 1e12 + 1}, w1, w2, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestNetworkFile: a network written and read back is the same to the
// bit, and scores a row as the training's own forward pass does. The
// file has a row for each feature the model has, labelled by it, not
// one for every index up to the largest.
func TestNetworkFile(t *testing.T) {
	n := testNetwork(t)
	var b bytes.Buffer
	if err := n.Write(&b); err != nil {
		t.Fatal(err)
	}
	want := "terrace-model 2\napp nn\nfeatures 4\nhidden 2\nactivation relu\nclasses 3\noutput softmax\n" +
		"hidden bias 0.5 -0.25\nhidden 0 1 0\nhidden 2 0 1\nhidden 7 1e-07 -3.4028235e+38\nhidden 1000000000000 0.1 2\n" +
		"output bias 0.125 0 -0.125\noutput 0 1 -1 0.3\noutput 1 -2 2 0.7\nend\n"
	if b.String() != want {
		t.Fatalf("model file:\n%s\nwant:\n%s", b.String(), want)
	}
	got, err := ReadNetwork(bytes.NewReader(b.Bytes()), "m")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Features, n.Features) || got.Hidden != 2 || got.Classes != 3 || !slices.Equal(got.W1, n.W1) || !slices.Equal(got.W2, n.W2) {
		t.Fatalf("read back %+v, want %+v", got, n)
	}
	// Feature 10^12 lifts hidden unit 1 (by 2 x 1), which votes for
	// class 1; features 3 and 9 are not the model's and left out.
	d := &data.Classes{X: &data.Sparse{Labels: []float32{1}, RowPtr: []int{0, 3}, Keys: []uint64{3, 9, 1e12}, Vals: []float32{1, 5, 1}, NumFeatures: 1e12 + 1}, Class: []uint16{1}, NumClasses: 3}
	var class int
	got.Predictions(d, func(c int, _ []float64) { class = c })
	if acc, _ := got.Evaluate(d); class != 1 || acc != 1 {
		t.Errorf("predicted class %d, accuracy %v; want 1 and 1", class, acc)
	}
}

// TestNetworkFileVersion1: a file of the first format (written by the
// eleventh and twelfth sessions' code: a row for every index up to the
// largest, labelled 0, 1, ...) still reads, as the same weights, and
// scores as before.
func TestNetworkFileVersion1(t *testing.T) {
	f, err := os.Open("testdata/v1.nn.model")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := ReadNetwork(f, "v1.nn.model")
	if err != nil {
		t.Fatal(err)
	}
	want := testNetwork(t)
	if !slices.Equal(n.Features, []uint64{0, 1, 2, 3}) || !slices.Equal(n.W1, want.W1) || !slices.Equal(n.W2, want.W2) {
		t.Fatalf("read %+v, want features 0 to 3 and %v, %v", n, want.W1, want.W2)
	}
	// Feature 3 lifts hidden unit 1, as in the version 2 test above;
	// feature 9 is beyond the model.
	d := &data.Classes{X: &data.Sparse{Labels: []float32{1}, RowPtr: []int{0, 2}, Keys: []uint64{3, 9}, Vals: []float32{1, 5}, NumFeatures: 10}, Class: []uint16{1}, NumClasses: 3}
	if acc, _ := n.Evaluate(d); acc != 1 {
		t.Errorf("accuracy %v; want 1", acc)
	}
	old, err := os.ReadFile("testdata/v1.nn.model")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, file, at string }{
		{"a row out of place", strings.Replace(string(old), "hidden 1 ", "hidden 2 ", 1), "m:10:"},
		{"a row missing", strings.Replace(string(old), "hidden 1 0 1\n", "", 1), "m:10:"},
	} {
		if _, err := ReadNetwork(strings.NewReader(c.file), "m"); !errors.Is(err, ErrNetworkModel) || !strings.Contains(err.Error(), c.at) {
			t.Errorf("%s: %v; want %v at %s", c.name, err, ErrNetworkModel, c.at)
		}
	}
}

// TestNetworkFileDamaged: a model file cut short or damaged anywhere is
// refused with ErrNetworkModel, naming the file and the line.
func TestNetworkFileDamaged(t *testing.T) {
	var b bytes.Buffer
	if err := testNetwork(t).Write(&b); err != nil {
		t.Fatal(err)
	}
	good := b.String()
	for _, c := range []struct {
		name, file, at string
	}{
		{"torn to nothing", "", "m:1:"},
		{"torn mid-line", good[:strings.Index(good, "hidden 7 ")+12], "m:11:"},
		{"torn before a newline", good[:strings.Index(good, "\noutput bias")], "m:12:"},
		{"torn after a whole line", good[:strings.Index(good, "output 0")], "m:14:"},
		{"torn before its end", strings.TrimSuffix(good, "end\n"), "m:16:"},
		{"liblinear", "solver_type L2R_LR\nnr_class 3\n", "m:1:"},
		{"newer version", strings.Replace(good, "terrace-model 2", "terrace-model 3", 1), "m:1:"},
		{"another app", strings.Replace(good, "app nn", "app mlr", 1), "m:2:"},
		{"another activation", strings.Replace(good, "relu", "tanh", 1), "m:5:"},
		{"one class", strings.Replace(good, "classes 3", "classes 1", 1), "m:6:"},
		{"fewer features said", strings.Replace(good, "features 4", "features 3", 1), "m:12:"},
		{"more features said", strings.Replace(good, "features 4", "features 5", 1), "m:13:"},
		{"a row short", strings.Replace(good, "hidden 2 0 1\n", "hidden 2 0\n", 1), "m:10:"},
		{"features out of order", strings.Replace(good, "hidden 7 ", "hidden 1 ", 1), "m:11:"},
		{"a feature twice", strings.Replace(good, "hidden 7 ", "hidden 2 ", 1), "m:11:"},
		{"a feature not a number", strings.Replace(good, "hidden 7 ", "hidden x7 ", 1), "m:11:"},
		{"a hidden row for the bias", strings.Replace(good, "hidden 7 ", "hidden bias ", 1), "m:11:"},
		{"an output row out of place", strings.Replace(good, "output 1 ", "output 2 ", 1), "m:15:"},
		{"not a number", strings.Replace(good, "0.3", "0.3x", 1), "m:14:"},
		{"NaN", strings.Replace(good, "0.3", "NaN", 1), "m:14:"},
		{"overflows float32", strings.Replace(good, "0.3", "1e39", 1), "m:14:"},
		{"bytes after end", good + "hidden 0 1 1\n", "m:17:"},
	} {
		_, err := ReadNetwork(strings.NewReader(c.file), "m")
		if !errors.Is(err, ErrNetworkModel) || !strings.Contains(err.Error(), c.at) {
			t.Errorf("%s: %v; want %v at %s", c.name, err, ErrNetworkModel, c.at)
		}
		if torn := strings.HasPrefix(c.name, "torn"); torn != strings.Contains(fmt.Sprint(err), "cut short") {
			t.Errorf("%s: %v; want it said cut short only of a file cut short", c.name, err)
		}
	}
}

// TestNewNetworkRefusesMismatch: weights that do not fit the shape said
// are refused rather than written as a file no reader takes.
func TestNewNetworkRefusesMismatch(t *testing.T) {
	keys := []uint64{0, 1, 2, 3, 4}
	if _, err := NewNetwork(keys, make([]float32, 9), make([]float32, 9), 2, 3); err == nil {
		t.Error("9 hidden weights for 5 keys of 2 units were taken")
	}
	if _, err := NewNetwork(keys, make([]float32, 10), make([]float32, 9), 2, 1); err == nil {
		t.Error("one class was taken")
	}
	if _, err := NewNetwork([]uint64{0, 1, 3, 3, 4}, make([]float32, 10), make([]float32, 9), 2, 3); err == nil {
		t.Error("a key twice was taken")
	}
	if _, err := NewNetwork([]uint64{1, 2, 3, 4, 5}, make([]float32, 10), make([]float32, 9), 2, 3); err == nil {
		t.Error("keys without the biases' were taken")
	}
}
