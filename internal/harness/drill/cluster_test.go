//go:build unix

package drill

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// fakeNode stands in for terrace: the coordinator announces an address,
// a worker its first acknowledged push once the file $TERRACE_FAKE_GO
// exists,
// every node leaves with status 0 on SIGTERM or SIGINT (as a draining
// node does) and announces no eviction endpoint, so that a notice
// arrives as SIGTERM.
const fakeNode = `#!/bin/sh
trap 'exit 0' TERM INT
if [ "$1" = coordinator ]; then echo "terrace coordinator listening on 127.0.0.1:1"; fi
if [ "$1" = train ]; then
	while [ ! -e "$TERRACE_FAKE_GO" ]; do sleep 0.02; done
	echo "terrace drill: first acknowledged push"
fi
while :; do sleep 0.05; done
`

// TestClusterMachines maps the local provider's calls onto processes: a
// started machine runs a server and its workers, a notice makes them
// leave cleanly, a kill SIGKILLs them, a drain makes them leave cleanly,
// and none of these counts as a failure; Close leaves no process.
// (SIGKILLing the process that runs a cluster is
// TestKilledDrillLeavesNoChildren's: the same supervisor starts them.)
func TestClusterMachines(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "terrace")
	if err := os.WriteFile(bin, []byte(fakeNode), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A report left by an earlier run in the directory is not this run's.
	run := filepath.Join(dir, "run")
	if err := os.MkdirAll(run, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run, "worker-0.json"), []byte(`{"rank":0}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := StartCluster(ctx, ClusterConfig{Binary: bin, RunDir: run, Servers: 1, Workers: 2, WorkersPerMachine: 2, Stage: "1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	goFile := filepath.Join(dir, "go")
	t.Setenv("TERRACE_FAKE_GO", goFile)
	names := map[string]string{}
	start := func(key string, class Role) {
		n, err := c.StartMachine(class)
		if err != nil {
			t.Fatal(err)
		}
		names[key] = n
	}
	start("drained", Reliable) // the cluster forms with it
	// Before training, later machines wait; one gone before it started
	// has nothing to stop.
	start("gone before", Transient)
	if err := c.Kill(names["gone before"]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitMachine(ctx, names["gone before"]); !errors.Is(err, ErrUnknownMachine) {
		t.Errorf("a machine killed before it started has processes: %v", err)
	}
	start("noticed", Transient)
	start("killed", Transient)
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Training():
	case <-ctx.Done():
		t.Fatal("training never started")
	}
	if names["gone before"] != "transient-0" || names["noticed"] != "transient-1" || names["killed"] != "transient-2" {
		t.Fatalf("machines %v", names)
	}
	if err := c.Notice("transient-9"); !errors.Is(err, ErrUnknownMachine) {
		t.Errorf("notice to an unknown machine: %v", err)
	}
	for _, step := range []struct {
		key  string
		do   func(string) error
		exit string
	}{{"noticed", c.Notice, "exit status 0"}, {"killed", c.Kill, "signal: killed"}, {"drained", c.Drain, "exit status 0"}} {
		if err := step.do(names[step.key]); err != nil {
			t.Fatalf("%s: %v", step.key, err)
		}
		exits, err := c.WaitMachine(ctx, names[step.key])
		if err != nil {
			t.Fatalf("%s: %v", step.key, err)
		}
		if len(exits) != 3 {
			t.Errorf("%s: %d processes, want a server and 2 workers: %v", step.key, len(exits), exits)
		}
		for node, e := range exits {
			// A node signalled before its shell set the trap dies of
			// the SIGTERM itself: still the polite signal, not a kill.
			if e != step.exit && !(step.exit == "exit status 0" && e == "signal: terminated") {
				t.Errorf("%s: %s ended %q, want %q", step.key, node, e, step.exit)
			}
		}
	}
	// Peak is the machines that ran together (not the one dropped before
	// it started), and a machine started once they have exited does not
	// count them again.
	if p := c.Peak(); p != 3 {
		t.Errorf("peak %d machines, want the 3 that ran together", p)
	}
	start("late", Transient)
	if p := c.Peak(); p != 3 {
		t.Errorf("peak %d machines after one more started alone, want 3", p)
	}
	if err := c.Err(); err != nil {
		t.Errorf("machines stopped on purpose counted as failures: %v", err)
	}
	select {
	case <-c.Finished():
		t.Errorf("finished, though no worker trained to the end (an earlier run's report?)")
	default:
	}
	var pids []int
	for _, p := range c.d.sup.procs {
		pids = append(pids, p.pid())
	}
	c.Close()
	for _, pid := range pids {
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil {
			t.Errorf("process %d still exists after Close", pid)
		}
	}
}
