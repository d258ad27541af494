package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrainLDA runs `terrace train --app lda` on the shipped KOS corpus for
// a few epochs: progress lines, the largest topics' words, and the
// model's figures in the JSON report.
func TestTrainLDA(t *testing.T) {
	report := filepath.Join(t.TempDir(), "lda.json")
	cmd := exec.Command(terrace(t), "train", "--app", "lda", "--epochs", "4", "--topics", "10", "--report", report)
	cmd.Dir = repoFile("")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"epoch  4/4", "train log-likelihood/token", "held-out perplexity", "topic 1 (", "lda trained 12348 examples"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		App     string `json:"app"`
		Workers map[string]struct {
			LogLikelihood  float64 `json:"train_loglik_per_token"`
			TestPerplexity float64 `json:"test_perplexity"`
			Topics         []struct {
				Words []string `json:"words"`
			} `json:"topics"`
		} `json:"workers"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	w := rep.Workers["0"]
	if rep.App != "lda" || !(w.LogLikelihood < -6 && w.LogLikelihood > -9) || !(w.TestPerplexity > 1000) || len(w.Topics) != 10 || len(w.Topics[0].Words) != 10 {
		t.Errorf("report: app %q, rank 0 %+v", rep.App, w)
	}
}

// TestTrainLDARefusesLossyFlags: a flag that would part the count table
// from the topics is an error before anything starts.
func TestTrainLDARefusesLossyFlags(t *testing.T) {
	out, err := exec.Command(terrace(t), "train", "--app", "lda", "--train", repoFile("datasets/kos/doc_word_count.tsv.gz"), "--encoding", "fp16").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--app lda does not take --encoding") {
		t.Fatalf("err %v, output:\n%s", err, out)
	}
}
