package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrainStraggleReport: --straggle with --reassign reports the
// reassignment counts and, the audit being on, that no example was
// repeated or skipped; a bad pattern, on train or on a worker, or
// --peer-addr without --reassign, is refused before anything starts.
func TestTrainStraggleReport(t *testing.T) {
	report := filepath.Join(t.TempDir(), "r.json")
	out, err := exec.Command(terrace(t), "train", "--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz"),
		"--epochs", "1", "--workers", "3", "--consistency", "asp", "--straggle", "one:4x", "--reassign", "--report", report).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var rep map[string]any
	b, _ := os.ReadFile(report)
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, b)
	}
	for _, k := range []string{"straggle", "reassignments", "examples_reassigned", "examples_repeated", "examples_skipped"} {
		if _, ok := rep[k]; !ok {
			t.Errorf("report lacks %q", k)
		}
	}
	if rep["examples_repeated"] != 0.0 || rep["examples_skipped"] != 0.0 {
		t.Errorf("examples repeated %v, skipped %v; want 0 and 0 without faults", rep["examples_repeated"], rep["examples_skipped"])
	}
	for _, bad := range [][]string{{"train", "--straggle", "one:4"}, {"train", "--processes", "--straggle", "one:4"},
		{"worker", "--straggle", "one"}, {"worker", "--peer-addr", "127.0.0.1:0"}, {"train", "drill-worker", "--straggle-work", "-1s"}} {
		out, err := exec.Command(terrace(t), bad...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "straggle") && !strings.Contains(string(out), "reassign") {
			t.Errorf("train %v: %v\n%s", bad, err, out)
		}
	}
}
