package main

import (
	"bytes"
	"testing"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// TestJobProgressLines: the coordinator prints each pass once; passes
// restored from a checkpoint say so, in one line, instead of showing no
// metrics.
func TestJobProgressLines(t *testing.T) {
	var p jobProgress
	var b bytes.Buffer
	st := api.JobStatus{Number: 1, Results: []api.PassResult{
		{Pass: 1, Rank: -1, Restored: true},
		{Pass: 2, Rank: -1, Restored: true},
		{Pass: 3, Rank: -1, Restored: true},
		{Pass: 4, Rank: 0, Metrics: map[string]float64{"test_auc": 0.9}},
	}}
	p.show(&b, st)
	p.show(&b, st)
	want := "terrace coordinator: passes 1-3 restored from the checkpoint (evaluated in the run that trained them)\n" +
		"terrace coordinator: pass 4 evaluated by rank 0:  test_auc 0.9000\n"
	if b.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", b.String(), want)
	}
}
