package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/terrace-ml/terrace/apps/mf"
	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/internal/control/api"
)

// TestPredictMFWritesOut: predict --out with an mf model writes each
// rating's prediction (it was ignored without a word), and an lda model
// is named as one instead of failing on an mf file it lacks.
func TestPredictMFWritesOut(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "mf.model")
	os.Mkdir(model, 0o755)
	for name, body := range map[string]string{"global.tsv": "mean\t3\n", "users.tsv": "1\t0.5\n", "items.tsv": "2\t0.25\n"} {
		os.WriteFile(filepath.Join(model, name), []byte(body), 0o644)
	}
	ratings := filepath.Join(dir, "r.test")
	os.WriteFile(ratings, []byte("1\t2\t4\t0\n7\t7\t3\t0\n"), 0o644)
	out := filepath.Join(dir, "pred.txt")
	run := func(args ...string) error {
		c := predictCmd()
		c.SetArgs(args)
		c.SetOut(io.Discard)
		c.SetErr(io.Discard)
		return c.Execute()
	}
	if err := run("--model", model, "--data", ratings, "--out", out); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(out); err != nil || string(b) != "3.750000\n3.000000\n" {
		t.Fatalf("--out holds %q, %v; want each rating's prediction", b, err)
	}
	lda := filepath.Join(dir, "lda.model")
	os.Mkdir(lda, 0o755)
	os.WriteFile(filepath.Join(lda, "topic_word_counts.tsv"), []byte("0\t1\n"), 0o644)
	if err := run("--model", lda, "--data", ratings); err == nil || !strings.Contains(err.Error(), "is an lda model") {
		t.Fatalf("an lda model: %v", err)
	}
}

// TestExportSaysWhichModel: export names how far the job it read was,
// since a cluster that stays up may still be training it.
func TestExportSaysWhichModel(t *testing.T) {
	j := &api.Job{App: "lr", Passes: 5}
	if got := jobState(api.JobStatus{Job: j, PassesDone: 2}); got != "still training: 2 of 5 passes done" {
		t.Errorf("running: %q", got)
	}
	if got := jobState(api.JobStatus{Job: j, PassesDone: 5, Done: true}); got != "done, 5 passes" {
		t.Errorf("done: %q", got)
	}
}

// TestPredictMFStringIDs: predict reads a ratings file of string ids
// with the model's dictionaries, so an id scores with its own row
// whatever order the file names ids in, and one the model lacks with
// bias and factors 0.
func TestPredictMFStringIDs(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "mf.model")
	os.Mkdir(model, 0o755)
	for name, body := range map[string]string{
		"global.tsv": "version\t2\nmean\t3\nmin\t0\nmax\t10\nusers\tnumbers\nitems\tstrings\n",
		"users.tsv":  "276725\t0.5\n276726\t-1\n",
		"items.tsv":  "034545104X\t0.25\n0155061224\t2\n",
	} {
		os.WriteFile(filepath.Join(model, name), []byte(body), 0o644)
	}
	ratings := filepath.Join(dir, "bx.csv")
	os.WriteFile(ratings, []byte("\"User-ID\";\"ISBN\";\"Book-Rating\"\n\"276726\";\"0155061224\";\"5\"\n\"276725\";\"034545104X\";\"0\"\n\"276725\";\"NEWISBN\";\"7\"\n"), 0o644)
	out := filepath.Join(dir, "pred.txt")
	c := predictCmd()
	c.SetArgs([]string{"--model", model, "--data", ratings, "--out", out})
	c.SetOut(io.Discard)
	c.SetErr(io.Discard)
	if err := c.Execute(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(out); err != nil || string(b) != "4.000000\n3.750000\n3.500000\n" {
		t.Fatalf("--out holds %q, %v; want 3-1+2, 3+0.5+0.25 and 3+0.5", b, err)
	}
}

// TestStringIDsAcrossProcesses: the two workers of a `train --processes`
// run, separate processes that each read the training file, number its
// string ids alike, and say so in the report; the summary names the
// numbering.
func TestStringIDsAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of four processes")
	}
	dir := t.TempDir()
	report := filepath.Join(dir, "r.json")
	args := []string{"train", "--processes", "--app", "mf", "--passes", "2", "--factors", "4",
		"--train", repoFile("data/testdata/amazon.ratings.csv"), "--test", repoFile("data/testdata/amazon.test.csv"),
		"--servers", "1", "--workers", "2", "--replication", "1",
		"--run-dir", filepath.Join(dir, "run"), "--report", report, "--timeout", "1m"}
	out, err := exec.Command(terrace(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("terrace %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var rep struct {
		UserIDs *mf.Numbering `json:"user_ids"`
		Workers map[int]struct {
			UserIDs *mf.Numbering `json:"user_ids"`
		} `json:"workers"`
	}
	b, err := os.ReadFile(report)
	if err == nil {
		err = json.Unmarshal(b, &rep)
	}
	if err != nil {
		t.Fatal(err)
	}
	train, err := data.ReadRatings(repoFile("data/testdata/amazon.ratings.csv"))
	if err != nil {
		t.Fatal(err)
	}
	want := mf.Numbering{Distinct: train.UserIDs.Len(), Digest: fmt.Sprintf("%016x", train.UserIDs.Digest())}
	if len(rep.Workers) != 2 {
		t.Fatalf("%d worker reports, want 2\n%s", len(rep.Workers), out)
	}
	for rank, w := range rep.Workers {
		if w.UserIDs == nil || *w.UserIDs != want {
			t.Errorf("rank %d numbered the users %+v, want %+v", rank, w.UserIDs, want)
		}
	}
	if rep.UserIDs == nil || *rep.UserIDs != want || !strings.Contains(string(out), "user ids are strings: 8 distinct") {
		t.Errorf("the job's numbering %+v, want %+v; output:\n%s", rep.UserIDs, want, out)
	}
}
