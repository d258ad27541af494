package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestNoRowsNamesTheFile: a data file that is not empty but holds no
// rows (comments, a header, blank lines, a gzip stream of nothing) fails
// the run naming the file, for training and test data alike. lr once
// trained nothing and printed a9a-free figures of an untrained model for
// such a --train, and failed a pass on a NaN it could not record for
// such a --test.
func TestNoRowsNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var gz bytes.Buffer
	gzip.NewWriter(&gz).Close()
	comments := write("comments.svm", "# exported by a tool\n\n")
	nothing := write("nothing.svm.gz", gz.String())
	header := write("header.csv", "userId,movieId,rating,timestamp\r\n\r\n")
	ratings := write("ratings.csv", "1,2,3.5\n2,1,4\n")
	noDocs := write("docword.none.txt", "3\n10\n0\n")
	a9a, a9aTest := repoFile("datasets/a9a/a9a.gz"), repoFile("datasets/a9a/a9a.t.gz")
	for _, tc := range []struct {
		args []string
		file string
	}{
		{[]string{"--app", "lr", "--train", comments, "--test", a9aTest}, comments},
		{[]string{"--app", "lr", "--train", a9a, "--test", nothing}, nothing},
		{[]string{"--app", "mf", "--train", header, "--test", ratings}, header},
		{[]string{"--app", "mf", "--train", ratings, "--test", header}, header},
		{[]string{"--app", "mlr", "--train", nothing}, nothing},
		{[]string{"--app", "lasso", "--train", comments}, comments},
		{[]string{"--app", "lda", "--train", noDocs}, noDocs},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		args := append([]string{"train", "--passes", "1"}, tc.args...)
		out, err := exec.CommandContext(ctx, terrace(t), args...).CombinedOutput()
		cancel()
		if want := tc.file + ": no data rows"; err == nil || !bytes.Contains(out, []byte(want)) {
			t.Errorf("terrace %q: %v, want an error containing %q:\n%s", args, err, want, out)
		}
	}
}
