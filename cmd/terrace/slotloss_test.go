package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/keyspace"
)

// statusUntil polls the coordinator's status (terrace status --json)
// until ok holds, and fails the test with the last one if ctx ends first.
func statusUntil(t *testing.T, ctx context.Context, addr string, ok func(api.Status) bool) api.Status {
	t.Helper()
	var st api.Status
	for {
		out, err := exec.CommandContext(ctx, terrace(t), "status", "--coordinator", addr, "--json").Output()
		if err == nil && json.Unmarshal(out, &st) == nil && ok(st) {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the status never came: last %+v (err %v)", st, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func nodeState(st api.Status, id string) string {
	for _, n := range st.Nodes {
		if n.ID == id {
			return n.State
		}
	}
	return ""
}

// lostEvent finds a lost event in what terrace events prints.
var lostEvent = regexp.MustCompile(`epoch \d+ +lost `)

// TestKilledServersReportLostSlots: two servers of three with k = 2
// SIGKILLed at once take every copy of the slots whose chains were on
// both; the coordinator says so (a lost event naming the slots, status),
// where before it published the new layout and the slots' new head served
// them empty, silently. The slots it names are exactly those.
func TestKilledServersReportLostSlots(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs five processes")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, cw, addr, servers, _ := startJobCluster(t, ctx, 3)
	cw.await(t, ctx)
	killAll(servers[:2]...)
	st := statusUntil(t, ctx, addr, func(st api.Status) bool {
		return nodeState(st, "s0") == "dead" && nodeState(st, "s1") == "dead"
	})
	want := checkLoss(t, st, cw)
	ev := events(t, ctx, addr)
	if !lostEvent.MatchString(ev) || !strings.Contains(ev, fmt.Sprintf("every copy of %d slots of the first 1024", len(want))) {
		t.Errorf("no lost event naming %d slots:\n%s", len(want), ev)
	}
	out, err := exec.CommandContext(ctx, terrace(t), "status", "--coordinator", addr).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "LOST  every copy of some slots, once") {
		t.Errorf("terrace status: %v\n%s", err, out)
	}
	t.Logf("terrace status:\n%s\nterrace events:\n%s", out, ev)
	if !strings.Contains(cw.String(), "every copy of some slots is lost") {
		t.Errorf("the coordinator logged no warning:\n%s", cw)
	}
	killAll(servers[2])
	c.Process.Signal(syscall.SIGTERM)
	c.Wait()
}

// killAll SIGKILLs every process of cmds at once, then waits for each.
func killAll(cmds ...*exec.Cmd) {
	for _, c := range cmds {
		c.Process.Signal(syscall.SIGKILL)
	}
	for _, c := range cmds {
		c.Wait()
	}
}

// checkLoss checks that st reports one loss, of exactly the slots among
// the first 1024 whose two copies were on s0 and s1 of s0, s1 and s2
// (k = 2), and returns those slots.
func checkLoss(t *testing.T, st api.Status, coordinator *lineWatcher) []uint64 {
	t.Helper()
	rm, err := ring.New(0, []ring.Server{{ID: "s0"}, {ID: "s1"}, {ID: "s2"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var want []uint64
	for sl := range uint64(keyspace.SpreadSlots) {
		if !slices.Contains(rm.Chain(sl, 2, nil), 2) {
			want = append(want, sl)
		}
	}
	if st.CopiesLost != 1 || len(st.SlotLosses) != 1 {
		t.Fatalf("status after s0 and s1 were killed: %d losses %+v, want one\ncoordinator:\n%s", st.CopiesLost, st.SlotLosses, coordinator)
	}
	if l := st.SlotLosses[0]; l.SpreadCount != len(want) || l.Share <= 0 || !slices.Equal(l.Servers, []string{"s0", "s1"}) {
		t.Errorf("the loss names %d slots of the first 1024 and %.3f of the ring, held by %v; %d had both copies on s0 and s1",
			l.SpreadCount, l.Share, l.Servers, len(want))
	}
	return want
}

// TestRestartedServersReportLostSlots: two servers of three with k = 2
// SIGKILLed and started again at once under their IDs, while the third
// lives (docs/open.md): the slots whose copies were on both are lost,
// and said so, though the new processes join again under the old IDs
// (found by the coordinator's pings, or by their new incarnations,
// whichever comes first).
func TestRestartedServersReportLostSlots(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs seven processes")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, cw, addr, servers, _ := startJobCluster(t, ctx, 3)
	cw.await(t, ctx)
	killAll(servers[:2]...)
	var again []*exec.Cmd
	for i := range 2 {
		s, _ := startWatched(t, ctx, "joined", "server", "--coordinator", addr, "--id", fmt.Sprintf("s%d", i))
		again = append(again, s)
	}
	st := statusUntil(t, ctx, addr, func(st api.Status) bool { return st.CopiesLost > 0 })
	checkLoss(t, st, cw)
	if ev := events(t, ctx, addr); !lostEvent.MatchString(ev) {
		t.Errorf("no lost event:\n%s", ev)
	}
	killAll(append(again, servers[2])...)
	c.Process.Signal(syscall.SIGTERM)
	c.Wait()
}

// TestRebuiltServersReportNothing: a server killed, its slots rebuilt on
// the others (each head reports its rebuild), then a second killed:
// every slot kept a copy at each step, and nothing is reported lost.
func TestRebuiltServersReportNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs five processes")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, cw, addr, servers, _ := startJobCluster(t, ctx, 3)
	cw.await(t, ctx)
	killAll(servers[0])
	// The rebuilds are reported: no part of the ring has fewer copies
	// than k (2, on the two servers left).
	statusUntil(t, ctx, addr, func(st api.Status) bool {
		return nodeState(st, "s0") == "dead" && st.UnderReplicated == 0
	})
	killAll(servers[1])
	st := statusUntil(t, ctx, addr, func(st api.Status) bool { return nodeState(st, "s1") == "dead" })
	ev := events(t, ctx, addr)
	if st.CopiesLost != 0 || lostEvent.MatchString(ev) {
		t.Errorf("a loss reported after one failure and its rebuild, then another: %+v\n%s", st.SlotLosses, ev)
	}
	if !strings.Contains(ev, "s1: ") {
		t.Errorf("s1's failure is not on the timeline:\n%s", ev)
	}
	killAll(servers[2])
	c.Process.Signal(syscall.SIGTERM)
	c.Wait()
}
