package data

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The shipped a9a files must exist: the quick start depends on them.
const (
	a9aTrain = "../datasets/a9a/a9a.gz"
	a9aTest  = "../datasets/a9a/a9a.t.gz"
)

func TestReadA9A(t *testing.T) {
	for _, tc := range []struct {
		path                  string
		rows, nnz, positives  int
		numFeatures           uint64
		firstKeys             []uint64
		firstLabel, lastLabel float32
	}{
		{a9aTrain, 32561, 451592, 7841, 124,
			[]uint64{3, 11, 14, 19, 39, 42, 55, 64, 67, 73, 75, 76, 80, 83}, 0, 1},
		// The test split never uses feature 123, so it is one narrower.
		{a9aTest, 16281, 225731, 3846, 123,
			[]uint64{1, 6, 17, 21, 35, 42, 54, 62, 71, 73, 74, 76, 80, 83}, 0, 1},
	} {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			s, err := ReadLIBSVM(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			if s.Len() != tc.rows || len(s.RowPtr) != tc.rows+1 {
				t.Fatalf("Len() = %d, len(RowPtr) = %d, want %d rows", s.Len(), len(s.RowPtr), tc.rows)
			}
			if len(s.Keys) != tc.nnz || len(s.Vals) != tc.nnz || s.RowPtr[tc.rows] != tc.nnz {
				t.Fatalf("nnz: %d keys, %d vals, RowPtr end %d, want %d", len(s.Keys), len(s.Vals), s.RowPtr[tc.rows], tc.nnz)
			}
			if s.NumFeatures != tc.numFeatures {
				t.Errorf("NumFeatures = %d, want %d", s.NumFeatures, tc.numFeatures)
			}
			pos := 0
			for i := range s.Len() {
				keys, vals, label := s.Row(i)
				if label == 1 {
					pos++
				} else if label != 0 {
					t.Fatalf("row %d: label %v", i, label)
				}
				for j, v := range vals {
					if v != 1 {
						t.Fatalf("row %d: value %v for key %d, a9a is binary", i, v, keys[j])
					}
				}
			}
			if pos != tc.positives {
				t.Errorf("%d positive labels, want %d", pos, tc.positives)
			}
			keys, _, label := s.Row(0)
			if !slices.Equal(keys, tc.firstKeys) || label != tc.firstLabel {
				t.Errorf("Row(0) = %v label %v, want %v label %v", keys, label, tc.firstKeys, tc.firstLabel)
			}
			if _, _, label := s.Row(s.Len() - 1); label != tc.lastLabel {
				t.Errorf("last label %v, want %v", label, tc.lastLabel)
			}
		})
	}
}

func TestParseLIBSVM(t *testing.T) {
	long := new(strings.Builder)
	long.WriteString("1")
	for i := range 30000 { // about 300 KB, several times the read buffer
		fmt.Fprintf(long, " %d:%d", i+1, i%7)
	}
	longKeys := make([]uint64, 30000)
	for i := range longKeys {
		longKeys[i] = uint64(i + 1)
	}

	type row struct {
		keys  []uint64
		vals  []float32
		label float32
	}
	for _, tc := range []struct {
		name        string
		in          string
		rows        []row
		numFeatures uint64
	}{
		{"empty", "", nil, 0},
		{"only blank lines", "\n  \n\t\r\n", nil, 0},
		{"plus minus labels", "+1 1:1\n-1 2:1\n", []row{{[]uint64{1}, []float32{1}, 1}, {[]uint64{2}, []float32{1}, 0}}, 3},
		{"zero one labels", "1 1:1\n0 2:1\n", []row{{[]uint64{1}, []float32{1}, 1}, {[]uint64{2}, []float32{1}, 0}}, 3},
		{"float labels", "1.0 1:1\n-1.0 2:1\n0.0 3:1\n", []row{
			{[]uint64{1}, []float32{1}, 1}, {[]uint64{2}, []float32{1}, 0}, {[]uint64{3}, []float32{1}, 0}}, 4},
		{"two other labels, the larger positive", "1 1:1\n2 2:1\n", []row{{[]uint64{1}, []float32{1}, 0}, {[]uint64{2}, []float32{1}, 1}}, 3},
		{"labels 2 and 4", "4 1:1\n2 2:1\n", []row{{[]uint64{1}, []float32{1}, 1}, {[]uint64{2}, []float32{1}, 0}}, 3},
		{"exponent labels", "1.000000000000000000e+00 1:1\n0.000000000000000000e+00 2:1\n", []row{{[]uint64{1}, []float32{1}, 1}, {[]uint64{2}, []float32{1}, 0}}, 3},
		{"minus one, zero and one", "-1 1:1\n0 2:1\n1 3:1\n", []row{
			{[]uint64{1}, []float32{1}, 0}, {[]uint64{2}, []float32{1}, 0}, {[]uint64{3}, []float32{1}, 1}}, 4},
		{"crlf and blank lines", "1 1:0.5 3:2\r\n\r\n\n0 2:-1e-3\r\n", []row{
			{[]uint64{1, 3}, []float32{0.5, 2}, 1}, {[]uint64{2}, []float32{-1e-3}, 0}}, 4},
		{"no final newline", "1 5:1", []row{{[]uint64{5}, []float32{1}, 1}}, 6},
		{"tabs and trailing spaces", "1\t1:1\t 2:3  \n", []row{{[]uint64{1, 2}, []float32{1, 3}, 1}}, 3},
		{"comments", "# header\n1 1:1 # note\n0 2:1#tight\n", []row{
			{[]uint64{1}, []float32{1}, 1}, {[]uint64{2}, []float32{1}, 0}}, 3},
		{"row without features", "1\n0 7:2\n", []row{{[]uint64{}, []float32{}, 1}, {[]uint64{7}, []float32{2}, 0}}, 8},
		{"index zero", "1 0:2\n", []row{{[]uint64{0}, []float32{2}, 1}}, 1},
		{"large index", "1 18446744073709551614:1\n", []row{{[]uint64{1<<64 - 2}, []float32{1}, 1}}, 1<<64 - 1},
		{"explicit zero value", "1 4:0\n", []row{{[]uint64{4}, []float32{0}, 1}}, 5},
		{"unsorted indices", "1 9:1 2:0.5 7:3\n0 3:1\n", []row{
			{[]uint64{2, 7, 9}, []float32{0.5, 3, 1}, 1}, {[]uint64{3}, []float32{1}, 0}}, 10},
		{"qid", "1 qid:3 1:1 4:2\n0  qid:3\n", []row{{[]uint64{1, 4}, []float32{1, 2}, 1}, {[]uint64{}, []float32{}, 0}}, 5},
		{"long line", long.String() + "\n0 30001:1\n", []row{
			{longKeys, nil, 1}, {[]uint64{30001}, []float32{1}, 0}}, 30002},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseLIBSVM(strings.NewReader(tc.in), "in")
			if err != nil {
				t.Fatal(err)
			}
			if s.Len() != len(tc.rows) || len(s.RowPtr) != len(tc.rows)+1 || s.RowPtr[0] != 0 {
				t.Fatalf("Len() = %d, RowPtr %v, want %d rows", s.Len(), s.RowPtr, len(tc.rows))
			}
			for i, want := range tc.rows {
				keys, vals, label := s.Row(i)
				if !slices.Equal(keys, want.keys) || label != want.label ||
					(want.vals != nil && !slices.Equal(vals, want.vals)) || len(vals) != len(keys) {
					t.Errorf("Row(%d) = %v %v label %v, want %v %v label %v", i, keys, vals, label, want.keys, want.vals, want.label)
				}
			}
			if s.NumFeatures != tc.numFeatures {
				t.Errorf("NumFeatures = %d, want %d", s.NumFeatures, tc.numFeatures)
			}
		})
	}
}

// gzipped compresses b. With pseudo-random content the deflate stream is
// long enough to be cut in the middle of the data.
func gzipped(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func noisyLIBSVM(lines int) []byte {
	var b bytes.Buffer
	g := splitmix64(42)
	for range lines {
		fmt.Fprintf(&b, "%d", g.below(2))
		k := uint64(0)
		for range 8 {
			k += 1 + g.below(1000)
			fmt.Fprintf(&b, " %d:%.6f", k, float64(g.below(1e6))/1e6)
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// linesBeforeBreak returns the 1-based number of the line that a reader of
// the damaged gzip stream z is in when the stream fails.
func linesBeforeBreak(t *testing.T, z []byte) int {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(z))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr)
	if err == nil {
		t.Fatal("damaged gzip stream read without error")
	}
	return bytes.Count(got, []byte("\n")) + 1
}

func TestParseLIBSVMMalformed(t *testing.T) {
	const lines = 3000
	z := gzipped(t, noisyLIBSVM(lines))
	truncated := z[:len(z)/2]
	noTrailer := z[:len(z)-8]
	badCRC := slices.Clone(z)
	badCRC[len(badCRC)-8] ^= 0xff

	for _, tc := range []struct {
		name   string
		in     string
		line   int
		reason string // a substring of the LineError's Reason
	}{
		{"third label", "1 1:1\n2 1:1\n\n1 2:1\n3 1:1\n", 5, `label 3 is a third class after 1 (line 1) and 2 (line 2)`},
		{"third label after standard ones", "-1 1:1\n1 1:1\n2 1:1\n", 3, `label 2 is a third class after 0 (line 1) and 1 (line 2)`},
		{"one other label alone", "\n2 1:1\n2 2:1\n", 2, `label 2, and no other`},
		{"word label", "yes 1:1\n", 1, `label "yes"`},
		{"missing label", "1 1:1\n\n 3:1 4:1\n", 3, `label "3:1"`},
		{"bad index", "1 1:1\n0 1:1\n1 x3:1\n", 3, `feature index "x3" is not an integer`},
		{"empty index", "1 :1\n", 1, `feature index "" is not an integer`},
		{"float index", "1 1.5:1\n", 1, `feature index "1.5" is not an integer`},
		{"negative index", "1 -3:1\n", 1, `feature index "-3" is negative`},
		{"index too large", "1 18446744073709551615:1\n", 1, `feature index "18446744073709551615" is too large`},
		{"index overflows", "1 99999999999999999999:1\n", 1, `is too large`},
		{"repeated index", "1 1:1 2:1 2:3\n", 1, "feature index 2 appears twice (values 1 and 3)"},
		{"repeated index out of order", "1 1:1\n1 5:1 3:1 5:2\n", 2, "feature index 5 appears twice (values 1 and 2)"},
		{"qid in place of a feature", "1 1:1 qid:3\n", 1, `feature index "qid" is not an integer`},
		{"missing colon", "1 1:1\n0 3\n", 2, `feature "3" has no colon`},
		{"empty value", "1 3:\n", 1, `feature 3 value "" is empty`},
		{"word value", "1 3:abc\n", 1, `feature 3 value "abc" is not a number`},
		{"NaN value", "1 1:1\r\n0 3:NaN\r\n", 2, `feature 3 value "NaN" is not finite`},
		{"infinite value", "1 3:-inf\n", 1, `feature 3 value "-inf" is not finite`},
		{"value out of range", "1 3:1e39\n", 1, `feature 3 value "1e39" is out of float32 range`},
		{"long token clipped", "1 " + strings.Repeat("7", 100) + "\n", 1, `feature "7777777777777777777777777777777777777777"...`},
		{"truncated gzip", string(truncated), linesBeforeBreak(t, truncated), "truncated or corrupt input: unexpected EOF"},
		{"gzip without trailer", string(noTrailer), lines + 1, "truncated or corrupt input: unexpected EOF"},
		{"gzip bad checksum", string(badCRC), lines + 1, "gzip: invalid checksum"},
		{"bad gzip header", "\x1f\x8b\x08\xff\x00", 0, "bad gzip header"},
		{"MNIST's images", "\x00\x00\x08\x03\x00\x00\x27\x10\x00\x00\x00\x1c\x00\x00\x00\x1c\x00", 0, "an IDX file (MNIST's binary format), not lines of text"},
		{"MNIST's labels, gzip", string(gzipped(t, []byte("\x00\x00\x08\x01\x00\x00\x00\x02\x07\x02"))), 0, "an IDX file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const name = "bad.txt"
			s, err := ParseLIBSVM(strings.NewReader(tc.in), name)
			checkLineError(t, s, err, name, tc.line, tc.reason)
		})
	}
}

func checkLineError(t *testing.T, got any, err error, name string, line int, reason string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; got %+v", got)
	}
	if !errors.Is(err, ErrMalformed) {
		t.Errorf("error %q does not wrap ErrMalformed", err)
	}
	var le *LineError
	if !errors.As(err, &le) {
		t.Fatalf("error %q (%T) is not a *LineError", err, err)
	}
	if le.File != name || le.Line != line {
		t.Errorf("error at %s:%d, want %s:%d: %v", le.File, le.Line, name, line, err)
	}
	if !strings.Contains(le.Reason, reason) {
		t.Errorf("reason %q, want it to contain %q", le.Reason, reason)
	}
	prefix := fmt.Sprintf("%s:%d: ", name, line)
	if line == 0 {
		prefix = name + ": "
	}
	if !strings.HasPrefix(err.Error(), prefix) {
		t.Errorf("Error() = %q, want prefix %q", err.Error(), prefix)
	}
}

func TestLineErrorMessage(t *testing.T) {
	err := error(&LineError{File: "a9a.txt", Line: 17, Reason: `feature index "x3" is not an integer`})
	if got, want := err.Error(), `a9a.txt:17: feature index "x3" is not an integer`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, ErrMalformed) {
		t.Error("LineError does not wrap ErrMalformed")
	}
	z := gzipped(t, []byte("1 1:1\n"))
	_, err = ParseLIBSVM(bytes.NewReader(z[:len(z)-3]), "cut.gz")
	if !errors.Is(err, io.ErrUnexpectedEOF) || !errors.Is(err, ErrMalformed) {
		t.Errorf("truncated gzip: %v does not wrap both io.ErrUnexpectedEOF and ErrMalformed", err)
	}
}

// failingReader fails with err after delivering b.
type failingReader struct {
	b   []byte
	err error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, r.err
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// A read failure is not the data's fault: it must not claim ErrMalformed,
// but must keep its cause and say where it happened.
func TestParseReadError(t *testing.T) {
	boom := errors.New("disk on fire")
	for _, tc := range []struct {
		in    string
		parse func(io.Reader) error
	}{
		{"1 1:1\n0 2:1\n1 3", func(r io.Reader) error { _, err := ParseLIBSVM(r, "in"); return err }},
		{"1 1 1\n1 2 1\n1 3", func(r io.Reader) error { _, err := ParseRatings(r, "in"); return err }},
	} {
		err := tc.parse(&failingReader{[]byte(tc.in), boom})
		if !errors.Is(err, boom) || errors.Is(err, ErrMalformed) {
			t.Errorf("error %v: want it to wrap the read error and not ErrMalformed", err)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "in:3: ") {
			t.Errorf("error %q, want it to name in:3", err)
		}
	}
}

func TestReadLIBSVMFiles(t *testing.T) {
	plain, err := os.ReadFile("testdata/small.libsvm")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// Names that lie: compression is detected from the content.
	gzAsTxt := filepath.Join(dir, "small.txt")
	txtAsGz := filepath.Join(dir, "small.gz")
	if err := os.WriteFile(gzAsTxt, gzipped(t, plain), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(txtAsGz, plain, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"testdata/small.libsvm", gzAsTxt, txtAsGz} {
		s, err := ReadLIBSVM(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if s.Len() != 4 || s.NumFeatures != 11 || !slices.Equal(s.Labels, []float32{1, 0, 0, 1}) ||
			!slices.Equal(s.RowPtr, []int{0, 3, 4, 4, 6}) ||
			!slices.Equal(s.Keys, []uint64{1, 3, 10, 2, 0, 4}) ||
			!slices.Equal(s.Vals, []float32{0.5, 2, -1.25, 1, 3, 1e-3}) {
			t.Errorf("%s: got %+v", path, s)
		}
	}
	if _, err := ReadLIBSVM(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: error %v, want fs.ErrNotExist", err)
	}
	bad := filepath.Join(dir, "bad.libsvm")
	if err := os.WriteFile(bad, []byte("1 1:1\n1 2:1 1:1 2:0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := ReadLIBSVM(bad)
	checkLineError(t, s, err, bad, 2, "feature index 2 appears twice")
}

func BenchmarkReadLIBSVM(b *testing.B) {
	for _, path := range []string{a9aTrain, a9aTest} {
		b.Run(filepath.Base(path), func(b *testing.B) {
			for b.Loop() {
				if _, err := ReadLIBSVM(path); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkParseLIBSVM parses a9a already decompressed in memory, to
// separate the parser's cost from gunzip's.
func BenchmarkParseLIBSVM(b *testing.B) {
	f, err := os.Open(a9aTrain)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		b.Fatal(err)
	}
	text, err := io.ReadAll(zr)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseLIBSVM(bytes.NewReader(text), "a9a"); err != nil {
			b.Fatal(err)
		}
	}
}
