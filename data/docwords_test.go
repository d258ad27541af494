package data

import (
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"
)

const (
	kosDocWords = "../datasets/kos/doc_word_count.tsv.gz"
	kosVocab    = "../datasets/kos/dictionary.txt"
)

// TestReadKOS reads the shipped KOS corpus: the counts the UCI page gives,
// and a first and last document checked against the file by hand.
func TestReadKOS(t *testing.T) {
	c, err := ReadDocWords(kosDocWords)
	if err != nil {
		t.Fatal(err)
	}
	if c.NumDocs() != 3430 || c.NumWords != 6906 || c.Tokens() != 467714 {
		t.Fatalf("%d documents, %d words, %d tokens; want 3430, 6906, 467714", c.NumDocs(), c.NumWords, c.Tokens())
	}
	if len(c.DocPtr) != c.NumDocs()+1 || c.DocPtr[0] != 0 || c.DocPtr[c.NumDocs()] != c.Tokens() {
		t.Fatalf("DocPtr has %d entries from %d to %d", len(c.DocPtr), c.DocPtr[0], c.DocPtr[len(c.DocPtr)-1])
	}
	if c.IDs[0] != 0 || c.IDs[3429] != 3429 {
		t.Errorf("ids from %d to %d, want 0 to 3429", c.IDs[0], c.IDs[3429])
	}
	// Document 0 starts "0 60 2", "0 75 1".
	if got := c.Doc(0)[:3]; !slices.Equal(got, []uint32{60, 60, 75}) {
		t.Errorf("document 0 starts %v, want [60 60 75]", got)
	}
	vocab, err := ReadVocab(kosVocab)
	if err != nil {
		t.Fatal(err)
	}
	if len(vocab) != c.NumWords || vocab[0] != "aarp" || vocab[len(vocab)-1] != "zones" {
		t.Errorf("vocabulary of %d words from %q to %q, want %d from aarp to zones", len(vocab), vocab[0], vocab[len(vocab)-1], c.NumWords)
	}
}

func TestParseDocWords(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in       string
		ids      []uint32
		ptr      []int
		words    []uint32
		numWords int
	}{
		{"empty", "", nil, []int{0}, nil, 0},
		{"tabs", "0\t3\t2\n0\t1\t1\n2\t0\t1\n", []uint32{0, 2}, []int{0, 3, 4}, []uint32{3, 3, 1, 0}, 4},
		{"spaces, CRLF and blank lines", "\r\n 5  7  1 \r\n\r\n5 2 2\r\n9 7 1", []uint32{5, 9}, []int{0, 3, 4}, []uint32{7, 2, 2, 7}, 8},
		{"repeated word", "1 4 1\n1 4 2\n", []uint32{1}, []int{0, 3}, []uint32{4, 4, 4}, 5},
		// UCI's own form: a header of D, W and NNZ, then 1-based ids;
		// NumWords is W.
		{"UCI docword", "3\n10\n4\n1 4 1\n1 7 2\n\n3 1 1\n3 10 1\n", []uint32{0, 2}, []int{0, 3, 5}, []uint32{3, 6, 6, 0, 9}, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseDocWords(strings.NewReader(tc.in), "in")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.IDs, tc.ids) || !slices.Equal(c.DocPtr, tc.ptr) || !slices.Equal(c.Words, tc.words) || c.NumWords != tc.numWords {
				t.Errorf("got ids %v ptr %v words %v (%d), want %v %v %v (%d)", c.IDs, c.DocPtr, c.Words, c.NumWords, tc.ids, tc.ptr, tc.words, tc.numWords)
			}
		})
	}
}

func TestParseDocWordsMalformed(t *testing.T) {
	z := gzipped(t, []byte(strings.Repeat("0\t1\t2\n", 2000)))
	for _, tc := range []struct {
		name   string
		in     string
		line   int
		reason string
	}{
		{"too few fields", "0 1 2\n0 1\n", 2, "2 fields, want doc word count"},
		{"too many fields", "0 1 2 3\n", 1, "4 fields"},
		{"UCI header cut short", "3430\n6906\n1 61 2\n", 3, "2 header line(s) of UCI's 3"},
		{"UCI header only", "3430\n6906\n", 0, "and no data"},
		{"UCI header not a number", "3430\nW\n", 2, `header line "W" is not a count`},
		{"UCI document 0", "2\n5\n1\n0 1 1\n", 4, "document 0 outside 1..2"},
		{"UCI word beyond W", "2\n5\n1\n1 6 1\n", 4, "word 6 outside 1..5"},
		{"UCI truncated", "2\n5\n3\n1 1 1\n2 2 1\n", 0, "NNZ says 3 data lines, the file has 2"},
		{"bad document", "0 1 1\n\nx 1 1\n", 3, `document id "x" is not a non-negative integer`},
		{"negative word", "0 -1 1\n", 1, `word id "-1" is not a non-negative integer`},
		{"word too large", "0 4294967296 1\n", 1, `word id "4294967296" does not fit in 32 bits`},
		{"zero count", "0 1 1\n0 2 0\n", 2, "count is 0"},
		{"huge count", "0 1 1048577\n", 1, `count "1048577" is over 1048576`},
		{"overflowing count", "0 1 99999999999999999999\n", 1, "is over"},
		{"float count", "0 1 1.5\n", 1, `count "1.5" is not a non-negative integer`},
		{"documents out of order", "0 1 1\n2 1 1\n1 1 1\n", 3, "document 1 after document 2"},
		{"document split", "0 1 1\n1 1 1\n0 2 1\n", 3, "document 0 after document 1"},
		{"truncated gzip", string(z[:len(z)-20]), linesBeforeBreak(t, z[:len(z)-20]), "truncated or corrupt input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const name = "docword.tsv"
			c, err := ParseDocWords(strings.NewReader(tc.in), name)
			checkLineError(t, c, err, name, tc.line, tc.reason)
		})
	}
}

func TestParseVocab(t *testing.T) {
	got, err := ParseVocab(strings.NewReader("aarp\r\n  abandon\t\nzones"), "in")
	if err != nil || !slices.Equal(got, []string{"aarp", "abandon", "zones"}) {
		t.Fatalf("got %q, %v", got, err)
	}
	for _, tc := range []struct {
		name   string
		in     string
		line   int
		reason string
	}{
		{"blank line", "a\n\nb\n", 2, "blank line"},
		{"white space inside", "a\nb c\n", 2, `word "b c" has white space inside`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const name = "dictionary.txt"
			v, err := ParseVocab(strings.NewReader(tc.in), name)
			checkLineError(t, v, err, name, tc.line, tc.reason)
		})
	}
}

func TestReadDocWordsMissing(t *testing.T) {
	_, err := ReadDocWords("testdata/no-such-file")
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrMalformed) {
		t.Fatalf("missing file: %v, want fs.ErrNotExist and not ErrMalformed", err)
	}
}
