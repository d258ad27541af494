package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// TestJobProgressLines: the coordinator prints each pass once; a pass
// restored from a checkpoint says so instead of showing no metrics.
func TestJobProgressLines(t *testing.T) {
	var p jobProgress
	var b bytes.Buffer
	st := api.JobStatus{Number: 1, Results: []api.PassResult{
		{Pass: 1, Rank: -1, Restored: true},
		{Pass: 2, Rank: 0, Metrics: map[string]float64{"test_auc": 0.9}},
	}}
	p.show(&b, st)
	p.show(&b, st)
	want := "terrace coordinator: pass 1 restored from the checkpoint (evaluated in the run that trained it)\n" +
		"terrace coordinator: pass 2 evaluated by rank 0:  test_auc 0.9000\n"
	if b.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", b.String(), want)
	}
	if strings.Count(b.String(), "pass 2") != 1 {
		t.Errorf("a pass printed twice:\n%s", b.String())
	}
}
