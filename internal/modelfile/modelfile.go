// Package modelfile reads the text model files the apps write, line by
// line, naming the file and the line in its errors and refusing a file
// cut short or with bytes after its end; and bounds the liblinear files
// they write (MaxModelFeatures).
package modelfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// MaxModelFeatures bounds the largest feature index a liblinear model
// file is written for: liblinear's format has a line for every index up
// to it (a file of 2^27 lines is 1.5-3 GB, and liblinear reads it into as
// many doubles), so hashed features (2^32) cannot have one. lasso and
// mlr, whose --model is such a file, refuse wider data before training.
const MaxModelFeatures = 1 << 27

// ErrModelTooWide refuses a liblinear model file for data whose indices
// reach beyond MaxModelFeatures.
var ErrModelTooWide = errors.New("too wide for a liblinear model file")

// Reader reads a model file line by line, naming the file and the line
// in its errors.
type Reader struct {
	r    *bufio.Reader
	kind string // "nn model", "mlr model"
	name string
	bad  error // the sentinel of a damaged file
	n    int
}

// NewReader reads r, a model file of kind ("nn model", "mlr model")
// named name; bad is the sentinel its errors for a damaged file wrap.
func NewReader(r io.Reader, kind, name string, bad error) *Reader {
	return &Reader{r: bufio.NewReader(r), kind: kind, name: name, bad: bad}
}

// Line returns the next line's fields; a line without its newline is
// the end of a file cut short.
func (lr *Reader) Line() ([]string, error) {
	s, err := lr.r.ReadString('\n')
	lr.n++
	switch {
	case err == io.EOF && s == "":
		return nil, lr.Errorf("the file ends here, cut short")
	case err == io.EOF:
		return nil, lr.Errorf("the last line has no end, cut short")
	case err != nil:
		return nil, fmt.Errorf("%s %s:%d: %w", lr.kind, lr.name, lr.n, err)
	}
	return strings.Fields(s), nil
}

// Errorf is the error of a damaged file at the line read last.
func (lr *Reader) Errorf(format string, args ...any) error {
	return fmt.Errorf("%s %s:%d: %w: %s", lr.kind, lr.name, lr.n, lr.bad, fmt.Sprintf(format, args...))
}

// End refuses anything after the last line, whatever it says it is.
func (lr *Reader) End(last string) error {
	if _, err := lr.r.ReadByte(); err != io.EOF {
		lr.n++
		return lr.Errorf("bytes after %s", last)
	}
	return nil
}

// Floats appends fields, each a finite float32, to dst.
func (lr *Reader) Floats(dst []float32, fields []string) ([]float32, error) {
	for _, s := range fields {
		v, err := strconv.ParseFloat(s, 32)
		if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, lr.Errorf("%q is not a finite number", s)
		}
		dst = append(dst, float32(v))
	}
	return dst, nil
}

// Features reads the value of a liblinear header's nr_feature line: a
// whole number from 0 to math.MaxInt32 (a damaged count is refused here,
// before any weight is made for it).
func (lr *Reader) Features(s string) (int, error) {
	nf, err := strconv.Atoi(s)
	if err != nil || nf < 0 || nf > math.MaxInt32 {
		return 0, lr.Errorf("nr_feature %q: want a whole number from 0 to %d", s, math.MaxInt32)
	}
	return nf, nil
}

// Bias reads the value of a liblinear header's bias line: a finite
// number, below 0 for none (a NaN was taken as none).
func (lr *Reader) Bias(s string) (float64, error) {
	b, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(b) || math.IsInf(b, 0) {
		return 0, lr.Errorf("bias %q is not a finite number", s)
	}
	return b, nil
}

// HeaderValue returns the value of key in the header of a liblinear
// model file whose start is head (the lines "key value" before the line
// "w"), and whether the header has it: how a reader tells one kind of
// model file from another before reading it.
func HeaderValue(head []byte, key string) (string, bool) {
	for _, l := range strings.Split(string(head), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == key {
			return f[1], true
		}
		if l == "w" {
			break
		}
	}
	return "", false
}
