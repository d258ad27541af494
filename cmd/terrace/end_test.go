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

// TestJobProgressLead: a coordinator's first term says in one line the
// passes evaluated before it, and prints only the later ones (a
// coordinator restarted on its --etcd-dir printed every earlier pass
// again); restored passes still say so.
func TestJobProgressLead(t *testing.T) {
	var p jobProgress
	var b bytes.Buffer
	st := api.JobStatus{Number: 2, Results: []api.PassResult{
		{Pass: 1, Rank: -1, Restored: true},
		{Pass: 2, Rank: 0, Metrics: map[string]float64{"test_auc": 0.8}},
		{Pass: 3, Rank: 1, Metrics: map[string]float64{"test_auc": 0.85}},
	}}
	p.lead(&b, st)
	p.show(&b, st)
	st.Results = append(st.Results, api.PassResult{Pass: 4, Rank: 0, Metrics: map[string]float64{"test_auc": 0.9}})
	p.lead(&b, st) // a later term in the same process: nothing
	p.show(&b, st)
	want := "terrace coordinator: 2 passes (2-3) of job 2 were evaluated before this coordinator led (terrace status --json has their metrics)\n" +
		"terrace coordinator: pass 1 restored from the checkpoint (evaluated in the run that trained it)\n" +
		"terrace coordinator: pass 4 evaluated by rank 0:  test_auc 0.9000\n"
	if b.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", b.String(), want)
	}
}

// TestCoordinatorReplicationAboveServers: a coordinator without tiers
// takes --replication above --servers (its chains grow to k as servers
// join: ps.TestChainsGrowToK); with tiers, and for train's fixed
// clusters, it is refused.
func TestCoordinatorReplicationAboveServers(t *testing.T) {
	if err := checkCoordinatorCluster(1, 1, 2, false); err != nil {
		t.Errorf("--servers 1 --replication 2 without tiers: %v", err)
	}
	if err := checkCoordinatorCluster(1, 1, 2, true); err == nil {
		t.Error("--servers 1 --replication 2 with tiers: taken")
	}
	if err := checkCoordinatorCluster(1, 1, 0, false); err == nil {
		t.Error("--replication 0: taken")
	}
	if err := checkCluster(1, 1, 2); err == nil {
		t.Error("train --servers 1 --replication 2: taken")
	}
}
