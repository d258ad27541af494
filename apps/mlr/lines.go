package mlr

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// lineReader reads a model file line by line for ReadNetwork and
// ReadLIBLINEAR, naming the file and the line in its errors.
type lineReader struct {
	r    *bufio.Reader
	kind string // "nn model", "mlr model"
	name string
	bad  error // the sentinel of a damaged file
	n    int
}

func newLineReader(r io.Reader, kind, name string, bad error) *lineReader {
	return &lineReader{r: bufio.NewReader(r), kind: kind, name: name, bad: bad}
}

// line returns the next line's fields; a line without its newline is
// the end of a file cut short.
func (lr *lineReader) line() ([]string, error) {
	s, err := lr.r.ReadString('\n')
	lr.n++
	switch {
	case err == io.EOF && s == "":
		return nil, lr.errorf("the file ends here, cut short")
	case err == io.EOF:
		return nil, lr.errorf("the last line has no end, cut short")
	case err != nil:
		return nil, fmt.Errorf("%s %s:%d: %w", lr.kind, lr.name, lr.n, err)
	}
	return strings.Fields(s), nil
}

// errorf is the error of a damaged file at the line read last.
func (lr *lineReader) errorf(format string, args ...any) error {
	return fmt.Errorf("%s %s:%d: %w: %s", lr.kind, lr.name, lr.n, lr.bad, fmt.Sprintf(format, args...))
}

// end refuses anything after the last line, whatever it says it is.
func (lr *lineReader) end(last string) error {
	if _, err := lr.r.ReadByte(); err != io.EOF {
		lr.n++
		return lr.errorf("bytes after %s", last)
	}
	return nil
}

// floats appends fields, each a finite float32, to dst.
func (lr *lineReader) floats(dst []float32, fields []string) ([]float32, error) {
	for _, s := range fields {
		v, err := strconv.ParseFloat(s, 32)
		if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, lr.errorf("%q is not a finite number", s)
		}
		dst = append(dst, float32(v))
	}
	return dst, nil
}
