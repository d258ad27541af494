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
	for _, want := range []string{"pass  4/4", "train log-likelihood/token", "held-out perplexity", "topic 1 (", "lda trained 12348 examples", "terrace: train log-likelihood/token"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		App string `json:"app"`
		// The last pass's figures, as lr's and mf's are.
		LogLikelihood  *float64 `json:"train_loglik_per_token"`
		TestPerplexity *float64 `json:"test_perplexity"`
		Workers        map[string]struct {
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
	// The last pass is evaluated, and the topics listed, by whichever
	// worker the coordinator handed it to.
	w := rep.Workers["0"]
	for _, r := range rep.Workers {
		if len(r.Topics) > 0 {
			w = r
		}
	}
	if rep.App != "lda" || !(w.LogLikelihood < -6 && w.LogLikelihood > -9) || !(w.TestPerplexity > 1000) || len(w.Topics) != 10 || len(w.Topics[0].Words) != 10 {
		t.Errorf("report: app %q, the last pass's evaluator %+v", rep.App, w)
	}
	if rep.LogLikelihood == nil || *rep.LogLikelihood != w.LogLikelihood || rep.TestPerplexity == nil || *rep.TestPerplexity != w.TestPerplexity {
		t.Errorf("report's last-pass figures: train_loglik_per_token %v, test_perplexity %v; the evaluator's %v, %v", rep.LogLikelihood, rep.TestPerplexity, w.LogLikelihood, w.TestPerplexity)
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

// TestDrillLDAStateSurvives runs the LDA sampler with every node its own
// process and three coordinators on etcd, SIGKILLs a coordinator (the
// leader, in some runs) and then a worker: the dead worker's partitions'
// topics must reach the surviving worker from etcd, through whichever
// coordinator leads (the sampler refuses to train on a state that is not
// the one its offset needs: errStateLost).
func TestDrillLDAStateSurvives(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of seven processes")
	}
	dir := t.TempDir()
	report := filepath.Join(dir, "r.json")
	args := []string{"train", "--processes", "--app", "lda", "--passes", "20", "--topics", "10",
		"--servers", "2", "--workers", "2", "--replication", "2", "--coordinators", "3",
		"--kill", "coordinator@" + drillKillAt + ",worker@1200ms",
		"--run-dir", filepath.Join(dir, "run"), "--report", report, "--timeout", "2m"}
	cmd := exec.Command(terrace(t), args...)
	cmd.Dir = repoFile("")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("terrace %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var rep drillReport
	b, err := os.ReadFile(report)
	if err == nil {
		err = json.Unmarshal(b, &rep)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !hasFault(&rep, "kill", "coordinator") || !hasFault(&rep, "kill", "worker") {
		t.Fatalf("faults %+v: want a coordinator and a worker killed (training took %.2fs)", rep.Faults, rep.TrainingSeconds)
	}
	if finished := finishedWorkers(&rep); finished != 1 {
		t.Fatalf("%d workers finished, want the one not killed\n%s", finished, out)
	}
	// The audit is the partition loop's, so lda is accounted for too: the
	// killed worker's partitions are taken over, none skipped.
	if rep.AckedUpdatesLost == nil || *rep.AckedUpdatesLost != 0 || rep.ExamplesSkipped == nil || *rep.ExamplesSkipped != 0 {
		t.Errorf("acked_updates_lost %v, examples_skipped %v; want 0 and 0 (notes %q)", ptr(rep.AckedUpdatesLost), ptr(rep.ExamplesSkipped), rep.Notes)
	}
	t.Logf("faults %+v; training %.2fs; examples repeated %v", rep.Faults, rep.TrainingSeconds, ptr(rep.ExamplesRepeated))
}
