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
// every node leaves with status 0 on SIGTERM or SIGINT (as a draining
// node does) and announces no eviction endpoint, so that a notice
// arrives as SIGTERM.
const fakeNode = `#!/bin/sh
trap 'exit 0' TERM INT
if [ "$1" = coordinator ]; then echo "terrace coordinator listening on 127.0.0.1:1"; fi
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
	c, err := StartCluster(ctx, ClusterConfig{Binary: bin, RunDir: filepath.Join(dir, "run"), Servers: 1, Workers: 2, WorkersPerMachine: 2, Stage: "1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	names := map[string]string{}
	for _, m := range []struct {
		key   string
		class Role
	}{{"drained", Reliable}, {"noticed", Transient}, {"killed", Transient}} {
		n, err := c.StartMachine(m.class)
		if err != nil {
			t.Fatal(err)
		}
		names[m.key] = n
	}
	if names["noticed"] != "transient-0" || names["killed"] != "transient-1" {
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
	if err := c.Err(); err != nil {
		t.Errorf("machines stopped on purpose counted as failures: %v", err)
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
