package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSparseIDsKeepTheModelSparse: lr on LIBSVM data whose indices reach
// 20 million but which has a few thousand features stores about those
// on the servers. Each evaluation pulled the whole range of keys up to
// the largest index, and a pull creates what it reads: 10 million keys
// a server.
func TestSparseIDsKeepTheModelSparse(t *testing.T) {
	var b strings.Builder
	for i := range 200 {
		fmt.Fprintf(&b, "%d %d:1 %d:1 %d:0.5\n", 2*(i%2)-1, 1+i%7, 1000+i*97, 20_000_000-i*13)
	}
	path := filepath.Join(t.TempDir(), "ids.svm")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, terrace(t), "train", "--train", path, "--test", path, "--passes", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	counts := regexp.MustCompile(`server-\d+: (\d+) keys`).FindAllSubmatch(out, -1)
	if len(counts) != 2 {
		t.Fatalf("no servers' key counts in the output:\n%s", out)
	}
	for _, c := range counts {
		// 407 features and the bias, each on both servers (k = 2).
		if n, _ := strconv.Atoi(string(c[1])); n > 1000 {
			t.Errorf("a server holds %d keys for 407 features:\n%s", n, out)
		}
	}
}
