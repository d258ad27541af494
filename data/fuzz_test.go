package data

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// fuzzName is the file name the fuzzers' parsers are given: every error
// they return must name it, or the user cannot tell which file is bad.
const fuzzName = "fuzz.txt"

// checkNamed fails unless err is nil or names the file; a malformed
// line's error must also wrap ErrMalformed, as callers test.
func checkNamed(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if !strings.Contains(err.Error(), fuzzName) {
		t.Fatalf("error does not name the file: %v", err)
	}
	var le *LineError
	if errors.As(err, &le) && !errors.Is(err, ErrMalformed) {
		t.Fatalf("line error not ErrMalformed: %v", err)
	}
}

func FuzzParseLIBSVM(f *testing.F) {
	for _, s := range []string{"+1 1:0.5 3:1\n-1 2:1\n", "1 1:1e40\n", "0 4294967296:1\n", "-1\n", "+1 2:1 1:1\n", "1 1:nan\n", "\n\n1 1:1"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, mode := range []labelMode{binaryLabels, classLabels, realLabels} {
			x, err := parseLIBSVM(bytes.NewReader(in), fuzzName, mode)
			checkNamed(t, err)
			if err == nil && len(x.Labels) != x.Len() {
				t.Fatalf("%d labels for %d rows", len(x.Labels), x.Len())
			}
		}
	})
}

func FuzzParseRatings(f *testing.F) {
	for _, s := range []string{"1\t2\t5\t881250949\n", "1::2::5::978300760\n", "userId,movieId,rating,timestamp\n1,2,3.5,1112486027\n", "1:\n6,3,2005-09-06\n", "a\tb\t3\n", "1\t2\tnan\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := ParseRatings(bytes.NewReader(in), fuzzName)
		checkNamed(t, err)
		if err != nil {
			return
		}
		if len(r.Users) != len(r.Items) || len(r.Users) != len(r.Values) {
			t.Fatalf("columns of %d, %d and %d", len(r.Users), len(r.Items), len(r.Values))
		}
	})
}

func FuzzParseDocWords(f *testing.F) {
	for _, s := range []string{"3\n5\n4\n1 2 1\n1 4 2\n3 5 1\n", "1\n1\n1\n1 1 1\n", "2\n2\n1\n3 1 1\n", "1\n1\n1\n1 1 0\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		_, err := ParseDocWords(bytes.NewReader(in), fuzzName)
		checkNamed(t, err)
	})
}

func FuzzParseVocab(f *testing.F) {
	f.Add([]byte("alpha\nbeta\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		_, err := ParseVocab(bytes.NewReader(in), fuzzName)
		checkNamed(t, err)
	})
}
