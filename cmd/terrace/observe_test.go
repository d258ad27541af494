package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/tier"
)

// TestStatusTable: terrace status shows the stage and why, the machines
// by class, the cost and the staleness, and each node's class, machine
// and part in the tiers.
func TestStatusTable(t *testing.T) {
	dollars, perHour := 0.0123, 0.28
	st := &api.Status{Epoch: 7, Ready: true, Stage: 2, StageReason: "planner: stage 2 does 40% more per dollar",
		Machines: api.MachineCount{Reliable: 1, Transient: 2}, Dollars: &dollars, DollarsPerHour: &perHour,
		Job: api.Progress{Pass: 1, Partitions: 8, Done: 3, Rate: 1000, ETA: 1500 * time.Millisecond, JobETA: 95 * time.Second, Staleness: 3},
		Nodes: []api.NodeStatus{
			{Role: api.RoleServer, ID: "r0", Machine: "reliable-0", Class: tier.Reliable, Tier: "backupps", State: "serving"},
			{Role: api.RoleServer, ID: "t1", Machine: "transient-1", Class: tier.Transient, Tier: "activeps", State: "dead"},
		}}
	st.Definition = &api.JobStatus{Number: 1, Job: &api.Job{App: "lr", Passes: 10, Consistency: "ssp:2"}, PassesDone: 2, Results: []api.PassResult{
		{Pass: 2, Rank: 0, Metrics: map[string]float64{"test_auc": 0.9016}},
		{Pass: 1, Rank: 1, Metrics: map[string]float64{"test_auc": 0.9011}},
		{Pass: 3, Rank: -1, Restored: true},
	}}
	// Passes count from 1 on the screen, from 0 in the API.
	st.Checkpoint = &api.CheckpointStatus{Dir: "ck", Committed: 1, CommittedPass: 1, Seq: 2, InProgress: true, Pass: 3, Servers: 2, Written: 1}
	var b bytes.Buffer
	printStatus(&b, "127.0.0.1:7070", st)
	out := b.String()
	for _, want := range []string{"EVALUATED  pass 2 by rank 0:  test_auc 0.9016", "JOB  pass 2/10  partitions 3/8",
		"CHECKPOINTS  ck  last committed 1 (after pass 2)  checkpoint 2 after pass 4: 1/2 servers written", "STAGE 2  planner: stage 2 does 40% more per dollar", "MACHINES  reliable 1  transient 2  cost $0.0123 so far, $0.2800/h now",
		"pass eta 1.5s  job eta 1m35s", "staleness 3 clocks", "CLASS", "server/backupps", "transient-1", "transient"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	st.Dollars, st.DollarsPerHour, st.StageReason = nil, nil, ""
	// Every pass trained, one worker still to report: the progress's
	// pass is past the last one, the screen's is not ("11/10").
	st.Definition.PassesDone, st.Job.Pass = 10, 10
	b.Reset()
	printStatus(&b, "c", st)
	if !strings.Contains(b.String(), "JOB  pass 10/10  ") {
		t.Errorf("a job whose passes are all trained, a worker still to report, not at 10/10:\n%s", b.String())
	}
	st.Definition.Done = true
	b.Reset()
	printStatus(&b, "c", st)
	if strings.Contains(b.String(), "cost") || strings.Contains(b.String(), "STAGE") {
		t.Errorf("a cost or a stage reason the coordinator did not give:\n%s", b.String())
	}
	if !strings.Contains(b.String(), "JOB  pass 10/10  ") {
		t.Errorf("a done job's passes, not 10/10:\n%s", b.String())
	}
}

// TestStepBarOffTerminal: off a terminal the work's own lines are the
// progress, untouched.
func TestStepBarOffTerminal(t *testing.T) {
	var b bytes.Buffer
	out, set, finish := stepBar(&b, "runs")
	set(1, 3)
	out.Write([]byte("run 1/3\n"))
	finish()
	if b.String() != "run 1/3\n" {
		t.Errorf("wrote %q", b.String())
	}
}

// TestPriceFlag: a bad --price fails at once, naming the flag.
func TestPriceFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"coordinator", "--price", "reliable=cheap"}, `--price item 1 "reliable=cheap": want a finite number >= 0`},
		{[]string{"coordinator", "--price", "spot=0.1"}, `--price item 1: "spot": unknown class`},
		{[]string{"coordinator", "--stage-reason", "planner"}, "--stage-reason needs --stage"},
		{[]string{"coordinator", "--sync-interval", "2s"}, "--sync-interval needs --stage"},
		{[]string{"train", "--processes", "--reliable", "1", "--transient", "1", "--price", "transient=-1"}, `--price item 1 "transient=-1"`},
		{[]string{"train", "--price", "reliable=1"}, "--price needs --reliable and --transient"},
	} {
		out, err := exec.Command(terrace(t), tc.args...).CombinedOutput()
		if err == nil || !bytes.Contains(out, []byte(tc.want)) {
			t.Errorf("%q: %v, want an error containing %q:\n%s", tc.args, err, tc.want, out)
		}
	}
}

// TestStatusWatchOffTerminal: status --watch into a pipe or a log keeps
// every table and writes no terminal escapes (it cleared a screen that
// was not there), and a cluster with no job shows no pass.
func TestStatusWatchOffTerminal(t *testing.T) {
	addr := startCoordinator(t, t.Context(), "--in-memory")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, terrace(t), "status", "--coordinator", addr, "--watch", "--every", "100ms").Output()
	if !bytes.Contains(out, []byte("COORDINATOR "+addr)) || bytes.ContainsRune(out, '\033') {
		t.Errorf("status --watch off a terminal: want tables without escapes, got %q", out)
	}
	if !bytes.Contains(out, []byte("JOB  pass -  ")) {
		t.Errorf("a cluster with no job shows a pass:\n%s", out)
	}
}

// TestStatusSilentCoordinator: status against a coordinator that accepts
// connections and never answers (SIGSTOPped) fails with
// api.ErrUnavailable once its --timeout passes, as against one that
// refuses; it said only "context deadline exceeded".
func TestStatusSilentCoordinator(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() // the kernel completes connections nobody accepts
	cmd := statusCmd()
	cmd.SetArgs([]string{"--coordinator", ln.Addr().String(), "--timeout", "200ms"})
	cmd.SetOut(io.Discard)
	if err := cmd.ExecuteContext(t.Context()); !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("status of a silent coordinator: %v; want %v", err, api.ErrUnavailable)
	}
}

// TestStatusNamesTheLeader: of several coordinators given, the status
// names the one that answered; it named the list, and after a failover
// nothing said which replica led.
func TestStatusNamesTheLeader(t *testing.T) {
	if got := answered("h0:7070,h1:7070,h2:7070", "https://h1:7070"); got != "h1:7070 (leading, of h0:7070,h1:7070,h2:7070)" {
		t.Errorf("three given: %q", got)
	}
	if got := answered("h0:7070", "http://h0:7070"); got != "h0:7070" {
		t.Errorf("one given: %q", got)
	}
}

// TestStatusSaysWhatTheEpochIs: under etcd (every coordinator process)
// the epoch is a revision, 8 before a second job and 2,360 after it, and
// nothing told the reader of status that it is not a count of placement
// changes; status says how many there were.
func TestStatusSaysWhatTheEpochIs(t *testing.T) {
	for _, tc := range []struct {
		st   api.Status
		want string
	}{
		{api.Status{Epoch: 7, Epochs: 7}, "epoch 7  stage"},
		{api.Status{Epoch: 2360, Epochs: 11}, "epoch 2360 (placement 11; numbered by etcd revision)  stage"},
		{api.Status{Epoch: 2360}, "epoch 2360 (an etcd revision: it orders placements, it does not count them)  stage"},
	} {
		var b strings.Builder
		printStatus(&b, "h0:7070", &tc.st)
		if !strings.Contains(b.String(), tc.want) {
			t.Errorf("epoch %d of %d: %q, want %q", tc.st.Epoch, tc.st.Epochs, strings.SplitN(b.String(), "\n", 2)[0], tc.want)
		}
	}
}
