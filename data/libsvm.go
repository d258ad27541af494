package data

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
)

// Sparse is a labelled sparse matrix in compressed sparse row form: row i
// has keys Keys[RowPtr[i]:RowPtr[i+1]] (strictly increasing) with values
// Vals at the same positions, and label Labels[i].
type Sparse struct {
	Labels []float32 // 0 or 1 (ReadLIBSVM); class numbers (ReadClasses) or targets (ReadRegression)
	RowPtr []int     // len Len()+1, RowPtr[0] == 0
	Keys   []uint64
	Vals   []float32
	// NumFeatures is the largest key plus one (0 if there are no features).
	// It is a uint64 because keys index the parameter key space directly;
	// a test set may see fewer features than its training set.
	NumFeatures uint64
}

// Len returns the number of rows.
func (s *Sparse) Len() int { return len(s.Labels) }

// Row returns the keys, values and label of row i. The slices alias s;
// their capacity is clipped so that appending to them cannot clobber the
// next row.
func (s *Sparse) Row(i int) (keys []uint64, vals []float32, label float32) {
	lo, hi := s.RowPtr[i], s.RowPtr[i+1]
	return s.Keys[lo:hi:hi], s.Vals[lo:hi:hi], s.Labels[i]
}

// ReadLIBSVM reads a LIBSVM file, plain or gzip-compressed. See ParseLIBSVM.
func ReadLIBSVM(path string) (*Sparse, error) {
	return readFile(path, ParseLIBSVM)
}

// ParseLIBSVM reads binary-labelled LIBSVM data, plain or gzip-compressed
// (detected from the magic bytes), naming errors after name.
//
// Each line is "label index:value index:value ..." with an optional trailing
// "# comment", and an optional "qid:N" after the label (SVMlight's
// ranking format; ignored). Labels -1/+1 and 0/1 (in any float spelling,
// such as 1.0) are stored as 0/1; so are any two other label values, the
// larger as 1, as LIBSVM's own binary sets spell some classes (1/2 in
// mushrooms and covtype.binary, 2/4 in breast-cancer). A third value, or
// one value alone other than those, is refused at its line. Indices are non-negative decimal
// integers, each at most once in a line, in any order (a row is stored
// sorted); values are finite float32s. Blank and
// comment-only lines are skipped; LF and CRLF endings are both accepted. An
// empty input yields an empty matrix.
//
// A malformed line gives a *LineError wrapping ErrMalformed.
func ParseLIBSVM(r io.Reader, name string) (*Sparse, error) {
	return parseLIBSVM(r, name, binaryLabels)
}

// labelMode is what a LIBSVM file's labels are.
type labelMode int

const (
	binaryLabels labelMode = iota // two classes, stored as 0/1
	classLabels                   // class numbers, kept (ReadClasses)
	realLabels                    // regression targets, kept (ReadRegression)
)

// ReadRegression reads LIBSVM lines whose labels are real-valued targets
// (any finite number, kept as it is), as LIBSVM's regression sets and
// Lasso take them.
func ReadRegression(path string) (*Sparse, error) {
	return readFile(path, func(r io.Reader, name string) (*Sparse, error) { return parseLIBSVM(r, name, realLabels) })
}

// parseLIBSVM is ParseLIBSVM with labels read as mode says.
func parseLIBSVM(r io.Reader, name string, mode labelMode) (*Sparse, error) {
	b := sparseBuilder{mode: mode}
	b.rowPtr.add(0)
	if err := eachLine(r, name, b.addLine); err != nil {
		return nil, err
	}
	labels, err := b.classes(name)
	if err != nil {
		return nil, err
	}
	s := &Sparse{
		Labels: labels,
		RowPtr: b.rowPtr.slice(),
		Keys:   b.keys.slice(),
		Vals:   b.vals.slice(),
	}
	if len(s.Keys) > 0 {
		s.NumFeatures = b.maxKey + 1
	}
	return s, nil
}

type sparseBuilder struct {
	labels, vals column[float32]
	keys         column[uint64]
	rowPtr       column[int]
	maxKey       uint64
	// row holds a line's features until they are known to be sorted.
	row []feature
	// lines counts the lines seen; values are the distinct label values
	// (-1 counted as 0), at most two, and at the line each first came.
	lines  int
	values []labelValue
	// mode: what the labels are.
	mode labelMode
}

type labelValue struct {
	v    float32
	line int
}

// label records the label value v of the current line, and refuses a
// third distinct one.
func (b *sparseBuilder) label(v float32) (reason string) {
	if b.mode == realLabels {
		return ""
	}
	if b.mode == classLabels {
		if v < 0 || v != float32(math.Trunc(float64(v))) || v >= MaxClasses {
			return fmt.Sprintf("label %g is not a class number (an integer from 0 to %d)", v, MaxClasses-1)
		}
		return ""
	}
	if v == -1 {
		v = 0
	}
	for _, x := range b.values {
		if x.v == v {
			return ""
		}
	}
	if len(b.values) == 2 && !(standard(v) && standard(b.values[0].v) && standard(b.values[1].v)) {
		return fmt.Sprintf("label %g is a third class after %g (line %d) and %g (line %d): lr is binary (-1/+1, 0/1, or two values, the larger positive)",
			v, b.values[0].v, b.values[0].line, b.values[1].v, b.values[1].line)
	}
	if len(b.values) < 2 {
		b.values = append(b.values, labelValue{v, b.lines})
	}
	return ""
}

func standard(v float32) bool { return v == 0 || v == 1 }

// classes turns the raw label values into 0/1: as they are for -1/+1 and
// 0/1, the larger of two other values as 1.
func (b *sparseBuilder) classes(name string) ([]float32, error) {
	if b.mode != binaryLabels {
		return b.labels.slice(), nil
	}
	pos := float32(1)
	switch {
	case len(b.values) == 1 && !standard(b.values[0].v):
		return nil, &LineError{File: name, Line: b.values[0].line, Reason: fmt.Sprintf(
			"label %g, and no other: lr is binary (-1/+1, 0/1, or two values, the larger positive), and one class alone other than those does not say which it is", b.values[0].v)}
	case len(b.values) == 2 && !(standard(b.values[0].v) && standard(b.values[1].v)):
		pos = max(b.values[0].v, b.values[1].v)
	}
	labels := b.labels.slice()
	for i, v := range labels {
		if v == pos {
			labels[i] = 1
		} else {
			labels[i] = 0
		}
	}
	return labels, nil
}

type feature struct {
	key uint64
	val float32
}

// addLine parses one line, adding a row unless the line is blank. A
// non-empty reason means the line is malformed; b is then inconsistent and
// must be dropped.
func (b *sparseBuilder) addLine(line []byte) (reason string) {
	if i := bytes.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	b.lines++
	tok, rest := field(line)
	if len(tok) == 0 {
		return ""
	}
	label, ok := parseLabel(tok)
	if !ok {
		return fmt.Sprintf("label %s is not a number", quote(tok))
	}
	if reason := b.label(label); reason != "" {
		return reason
	}
	rest = skipQID(rest)
	b.row = b.row[:0]
	sorted := true
	for {
		for len(rest) > 0 && isSpace(rest[0]) {
			rest = rest[1:]
		}
		if len(rest) == 0 {
			break
		}
		var f feature
		f.key, f.val, rest, reason = nextFeature(rest)
		if reason != "" {
			return reason
		}
		if n := len(b.row); n > 0 && f.key <= b.row[n-1].key {
			sorted = false
		}
		b.row = append(b.row, f)
	}
	if !sorted {
		// Tools other than LIBSVM's write features in any order: sort
		// the line (stably, so that a repeated index names its values in
		// the line's order) and refuse an index given twice.
		slices.SortStableFunc(b.row, func(x, y feature) int { return cmp.Compare(x.key, y.key) })
		for i := 1; i < len(b.row); i++ {
			if b.row[i].key == b.row[i-1].key {
				return fmt.Sprintf("feature index %d appears twice (values %g and %g)", b.row[i].key, b.row[i-1].val, b.row[i].val)
			}
		}
	}
	for _, f := range b.row {
		b.keys.add(f.key)
		b.vals.add(f.val)
	}
	b.labels.add(label)
	b.rowPtr.add(b.keys.len())
	if n := len(b.row); n > 0 {
		b.maxKey = max(b.maxKey, b.row[n-1].key)
	}
	return ""
}

// skipQID skips the "qid:N" that SVMlight's ranking format puts after the
// label: a binary classifier has no use for the query id.
func skipQID(rest []byte) []byte {
	for len(rest) > 0 && isSpace(rest[0]) {
		rest = rest[1:]
	}
	if tok, after := field(rest); bytes.HasPrefix(tok, []byte("qid:")) {
		return after
	}
	return rest
}

// nextFeature parses the "index:value" that b starts with. The common case,
// a short index, is scanned in one pass; anything else goes to
// parseFeature, which also explains what is wrong.
func nextFeature(b []byte) (key uint64, v float32, rest []byte, reason string) {
	i := 0
	for ; i < len(b) && i < 19 && b[i] >= '0' && b[i] <= '9'; i++ { // 19 digits cannot overflow
		key = key*10 + uint64(b[i]-'0')
	}
	if i == 0 || i == len(b) || b[i] != ':' {
		tok, rest := field(b)
		key, v, reason = parseFeature(tok)
		return key, v, rest, reason
	}
	j := i + 1
	for j < len(b) && !isSpace(b[j]) {
		j++
	}
	val := b[i+1 : j]
	v, why := parseFloat32(val)
	if why != "" {
		return 0, 0, nil, fmt.Sprintf("feature %d value %s %s", key, quote(val), why)
	}
	return key, v, b[j:], ""
}

func parseFeature(tok []byte) (key uint64, v float32, reason string) {
	colon := bytes.IndexByte(tok, ':')
	if colon < 0 {
		return 0, 0, fmt.Sprintf("feature %s has no colon (want index:value)", quote(tok))
	}
	idx, val := tok[:colon], tok[colon+1:]
	// MaxUint64 itself is refused so that NumFeatures cannot overflow.
	key, ok, tooBig := parseUint(idx, math.MaxUint64-1)
	switch {
	case tooBig:
		return 0, 0, fmt.Sprintf("feature index %s is too large", quote(idx))
	case !ok && len(idx) > 1 && idx[0] == '-':
		return 0, 0, fmt.Sprintf("feature index %s is negative", quote(idx))
	case !ok:
		return 0, 0, fmt.Sprintf("feature index %s is not an integer", quote(idx))
	}
	v, why := parseFloat32(val)
	if why != "" {
		return 0, 0, fmt.Sprintf("feature %d value %s %s", key, quote(val), why)
	}
	return key, v, ""
}

// parseLabel reads a label's value (finite).
func parseLabel(b []byte) (float32, bool) {
	switch string(b) {
	case "1", "+1":
		return 1, true
	case "0":
		return 0, true
	case "-1":
		return -1, true
	}
	f, reason := parseFloat32(b)
	return f, reason == ""
}
