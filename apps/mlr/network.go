package mlr

import (
	"bufio"
	"errors"
	"fmt"
	"github.com/terrace-ml/terrace/internal/modelfile"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/table"
)

// Network is a trained nn model read from or written to its model file
// (docs/format/nn.md). The weights are laid out as the job's tables hold
// them over the features the model has, so that scoring runs the
// training's own forward pass: W1 as nn.hidden, len(Features)+1 rows of
// Hidden values (row 0 the hidden units' biases, row i+1 feature
// Features[i]'s weights into them); W2 as nn.output, Hidden+1 rows of
// Classes values (row j hidden unit j's weights into the classes, row
// Hidden the classes' biases).
type Network struct {
	// Features are the features with input weights, in increasing order
	// (LIBSVM index i is feature i, MNIST's pixel p feature p): those of
	// the job's training and test data. Others are left out of a row's
	// scores, as a weight of 0.
	Features        []uint64
	Hidden, Classes int
	W1, W2          []float32
}

// ErrNetworkModel is returned for a file that is not a whole nn model
// file: a wrong header, a row missing or out of place, a value that is
// not a finite number, or a file cut short.
var ErrNetworkModel = errors.New("not a whole nn model file")

// NetworkMagic opens every nn model file: predict tells the format from
// liblinear's by it.
const NetworkMagic = "terrace-model "

// networkVersion is the format Write writes: 2 lists the features the
// model has, each row of the hidden layer labelled by its feature; 1, of
// the eleventh and twelfth sessions, had a row for every index up to the
// largest (ReadNetwork reads both).
const networkVersion = 2

// NewNetwork is the model of an nn job whose tables' weights are w1
// (nn.hidden, of keys: the biases' key 0, then feature f's key f+1, in
// increasing order) and w2 (nn.output, h+1 keys), of h hidden units and
// k classes, read from a cluster or a checkpoint; it takes w1 and w2
// over.
func NewNetwork(keys []uint64, w1, w2 []float32, h, k int) (*Network, error) {
	if len(keys) < 1 || keys[0] != 0 || h < 1 || k < 2 || len(w1) != len(keys)*h || len(w2) != (h+1)*k {
		return nil, fmt.Errorf("nn model: %d and %d weights for %d keys (the biases' first), %d hidden units, %d classes", len(w1), len(w2), len(keys), h, k)
	}
	n := &Network{Features: make([]uint64, len(keys)-1), Hidden: h, Classes: k, W1: w1, W2: w2}
	for i, key := range keys[1:] {
		if key <= keys[i] {
			return nil, fmt.Errorf("nn model: key %d after %d: want increasing keys", key, keys[i])
		}
		n.Features[i] = key - 1
	}
	return n, nil
}

// Write writes n as an nn model file (docs/format/nn.md). Each weight is
// written in the fewest digits that read back as the same float32, so a
// model read back scores exactly as the one written.
func (n *Network) Write(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%s%d\napp nn\nfeatures %d\nhidden %d\nactivation relu\nclasses %d\noutput softmax\n", NetworkMagic, networkVersion, len(n.Features), n.Hidden, n.Classes)
	// row writes the label in buf, then vals.
	var buf []byte
	row := func(vals []float32) {
		for _, v := range vals {
			buf = append(buf, ' ')
			buf = strconv.AppendFloat(buf, float64(v), 'g', -1, 32)
		}
		bw.Write(append(buf, '\n'))
	}
	h, k := n.Hidden, n.Classes
	buf = append(buf[:0], "hidden bias"...)
	row(n.W1[:h])
	for i, f := range n.Features {
		buf = strconv.AppendUint(append(buf[:0], "hidden "...), f, 10)
		row(n.W1[(i+1)*h : (i+2)*h])
	}
	buf = append(buf[:0], "output bias"...)
	row(n.W2[h*k:])
	for j := range h {
		buf = strconv.AppendInt(append(buf[:0], "output "...), int64(j), 10)
		row(n.W2[j*k : (j+1)*k])
	}
	bw.WriteString("end\n")
	return bw.Flush()
}

// Save writes n's model file to path.
func (n *Network) Save(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("nn model: %w", err)
	}
	if err := n.Write(f); err != nil {
		f.Close()
		return fmt.Errorf("nn model %s: %w", path, err)
	}
	return f.Close()
}

// ReadNetwork reads an nn model file from r, named name in its errors,
// of either version. Every line must be the one the format puts there,
// and end with a newline: a file cut short (a copy that failed, a full
// disk), or with a line damaged, is refused naming the file and the
// line, rather than read as a model that scores silently wrong.
func ReadNetwork(r io.Reader, name string) (*Network, error) {
	lr := modelfile.NewReader(r, "nn model", name, ErrNetworkModel)
	n := &Network{}
	version, features, err := n.readHeader(lr)
	if err != nil {
		return nil, err
	}
	// The weights grow as rows are read, not by the header's word: a
	// damaged count fails at the row it lacks, not in an allocation.
	feature := func(i int, label string) error {
		f, err := strconv.ParseUint(label, 10, 64)
		switch {
		case version == 1 && label != strconv.Itoa(i):
			return lr.Errorf("want the row %q, got %q", "hidden "+strconv.Itoa(i), "hidden "+label)
		case version == 2 && (err != nil || f == math.MaxUint64 || (i > 0 && f <= n.Features[i-1])):
			return lr.Errorf("row %q: want a feature index above the row before's", "hidden "+label)
		}
		n.Features = append(n.Features, f)
		return nil
	}
	if n.W1, err = readRows(lr, "hidden", features, n.Hidden, feature); err != nil {
		return nil, err
	}
	unit := func(i int, label string) error {
		if label != strconv.Itoa(i) {
			return lr.Errorf("want the row %q, got %q", "output "+strconv.Itoa(i), "output "+label)
		}
		return nil
	}
	out, err := readRows(lr, "output", n.Hidden, n.Classes, unit)
	if err != nil {
		return nil, err
	}
	// The file lists the output biases first; the table holds them last.
	n.W2 = slices.Concat(out[n.Classes:], out[:n.Classes])
	f, err := lr.Line()
	if err != nil {
		return nil, err
	}
	if len(f) != 1 || f[0] != "end" {
		return nil, lr.Errorf("want \"end\" after the %d output rows, got %q", n.Hidden, strings.Join(f, " "))
	}
	if err := lr.End(`"end"`); err != nil {
		return nil, err
	}
	return n, nil
}

// readHeader reads the header's lines, in their order, into n, and
// returns the format's version and the rows of features it says follow.
func (n *Network) readHeader(lr *modelfile.Reader) (version, features int, err error) {
	for _, h := range []struct {
		key      string
		dst      *int
		min, max int
		is       string
	}{
		{key: "terrace-model", dst: &version, min: 1, max: networkVersion}, {key: "app", is: "nn"},
		{key: "features", dst: &features, min: 0, max: math.MaxInt32},
		{key: "hidden", dst: &n.Hidden, min: 1, max: table.MaxWidth},
		{key: "activation", is: "relu"},
		{key: "classes", dst: &n.Classes, min: 2, max: table.MaxWidth},
		{key: "output", is: "softmax"},
	} {
		f, err := lr.Line()
		if err != nil {
			return 0, 0, err
		}
		if len(f) != 2 || f[0] != h.key {
			return 0, 0, lr.Errorf("want %q and its value, got %q", h.key, strings.Join(f, " "))
		}
		if h.dst == nil {
			if f[1] != h.is {
				return 0, 0, lr.Errorf("%s %q: want %q", h.key, f[1], h.is)
			}
			continue
		}
		v, err := strconv.Atoi(f[1])
		if err != nil || v < h.min || v > h.max {
			return 0, 0, lr.Errorf("%s %q: want a whole number from %d to %d", h.key, f[1], h.min, h.max)
		}
		*h.dst = v
	}
	return version, features, nil
}

// readRows reads layer's bias row and then n rows, each of width values,
// in that order; label checks row i's label (after the layer's name).
func readRows(lr *modelfile.Reader, layer string, n, width int, label func(i int, label string) error) ([]float32, error) {
	var dst []float32
	for i := -1; i < n; i++ {
		f, err := lr.Line()
		if err != nil {
			return nil, err
		}
		if len(f) < 2 || f[0] != layer || (i < 0) != (f[1] == "bias") {
			want := "bias"
			if i >= 0 {
				want = "row " + strconv.Itoa(i+1)
			}
			return nil, lr.Errorf("want %s's %s, got %q", layer, want, strings.Join(f[:min(len(f), 2)], " "))
		}
		if i >= 0 {
			if err := label(i, f[1]); err != nil {
				return nil, err
			}
		}
		if len(f)-2 != width {
			return nil, lr.Errorf("row %q has %d values, want %d", layer+" "+f[1], len(f)-2, width)
		}
		if dst, err = lr.Floats(dst, f[2:]); err != nil {
			return nil, err
		}
	}
	return dst, nil
}

// rowScratch is what scoring a row needs, reused across rows (a, the
// hidden activations, a Network's only).
type rowScratch struct {
	a      []float32
	places []int
	vals   []float32
}

// forward writes a row's class scores into p, leaving out features the
// model has no row for.
func (n *Network) forward(s *rowScratch, p []float64, fk []uint64, fv []float32) {
	if len(s.a) != n.Hidden {
		s.a = make([]float32, n.Hidden)
	}
	s.places, s.vals = s.places[:0], s.vals[:0]
	for j, f := range fk {
		if i, ok := slices.BinarySearch(n.Features, f); ok {
			s.places = append(s.places, i+1) // row 0 is the biases
			s.vals = append(s.vals, fv[j])
		}
	}
	forward(s.a, p, n.W1, n.W2, n.Hidden, n.Classes, s.places, s.vals)
}

// Evaluate scores d as the training's evaluation does: the accuracy of
// the most probable class, and the mean log loss.
func (n *Network) Evaluate(d *data.Classes) (acc, logloss float64) {
	var s rowScratch
	return score(d, n.Classes, func(p []float64, i int) { fk, fv, _ := d.X.Row(i); n.forward(&s, p, fk, fv) })
}

// Predictions calls each with every row of d's most probable class and
// its class probabilities (p, reused for the next row), in order.
func (n *Network) Predictions(d *data.Classes, each func(class int, p []float64)) {
	var s rowScratch
	predictions(d, n.Classes, func(p []float64, i int) { fk, fv, _ := d.X.Row(i); n.forward(&s, p, fk, fv) }, each)
}

// predictions calls each with every row of d's most probable class and
// its k class probabilities, whose scores forward writes.
func predictions(d *data.Classes, k int, forward func(p []float64, i int), each func(class int, p []float64)) {
	p := make([]float64, k)
	for i := range d.Len() {
		forward(p, i)
		each(argmax(softmax(p)), p)
	}
}

// argmax is the first index of p's largest value.
func argmax(p []float64) int {
	best := 0
	for c := range p {
		if p[c] > p[best] {
			best = c
		}
	}
	return best
}
