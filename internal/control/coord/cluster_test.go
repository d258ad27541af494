package coord

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/copies"
	"github.com/terrace-ml/terrace/internal/placement/tier"
)

// printStatus prints what the status says of the cluster as machines
// (testdata/status.txt): the stage and why, the machines alive by class,
// the clock spread, and each node's machine, class, part and clock.
func (h *harness) printStatus() {
	st := h.m.Status()
	fmt.Fprintf(&h.out, "stage %d", st.Stage)
	if st.Switching != "" {
		fmt.Fprintf(&h.out, " switching %s", st.Switching)
	}
	fmt.Fprintf(&h.out, " (%s)\nmachines reliable %d transient %d, staleness %d\n", st.StageReason, st.Machines.Reliable, st.Machines.Transient, st.Job.Staleness)
	if st.Epoch != st.Epochs {
		fmt.Fprintf(&h.out, "epoch %d, %d begun\n", st.Epoch, st.Epochs)
	}
	for _, n := range st.Nodes {
		fmt.Fprintf(&h.out, "%s %s %s on %s (%s)", n.Role, n.ID, n.State, n.Machine, n.Class)
		if n.Tier != "" {
			fmt.Fprintf(&h.out, " %s", n.Tier)
		}
		if n.Clock != 0 {
			fmt.Fprintf(&h.out, " clock %d", n.Clock)
		}
		fmt.Fprintln(&h.out)
	}
	if c := st.Checkpoint; c != nil {
		fmt.Fprintf(&h.out, "checkpoint: requested %v, last begun %d", c.Requested, c.Seq)
		switch {
		case c.InProgress && c.Inside:
			fmt.Fprintf(&h.out, " (inside pass %d, %d of %d servers written)", c.Pass+1, c.Written, c.Servers)
		case c.InProgress:
			fmt.Fprintf(&h.out, " (after pass %d, %d of %d servers written)", c.Pass, c.Written, c.Servers)
		}
		fmt.Fprintf(&h.out, ", committed %d", c.Committed)
		if c.CommittedInside {
			fmt.Fprintf(&h.out, " (inside pass %d)", c.CommittedPass+1)
		}
		if c.Abandoned != 0 {
			fmt.Fprintf(&h.out, ", abandoned %d: %s", c.Abandoned, c.Why)
		}
		fmt.Fprintln(&h.out)
	}
}

// TestCostSoFar: the cost integrates the machines alive over time at
// their class's price, and the samples thin out rather than drop the
// run's start when the series is full.
func TestCostSoFar(t *testing.T) {
	cm := clusterMeter{prices: tier.ByClass{Reliable: 0.2, Transient: 0.05}}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cm.advance(at, api.MachineCount{Reliable: 1, Transient: 2}) // 0.30 $/h from here
	cm.advance(at.Add(time.Hour), api.MachineCount{Reliable: 1})
	cm.advance(at.Add(3*time.Hour), api.MachineCount{})
	if want := 0.30 + 2*0.2; fmt.Sprintf("%.6f", cm.dollars) != fmt.Sprintf("%.6f", want) || cm.perHour != 0 {
		t.Fatalf("cost %v at %v $/h, want %v at 0", cm.dollars, cm.perHour, want)
	}
	cm.advance(at.Add(2*time.Hour), api.MachineCount{Reliable: 5}) // a clock that went back adds nothing
	if cm.dollars > 0.71 {
		t.Fatalf("cost %v after time went back", cm.dollars)
	}
	if (&clusterMeter{}).priced() {
		t.Error("a meter without prices says it has them")
	}

	for i := range historyCap + 10 {
		cm.record(api.Status{Time: at.Add(time.Duration(i) * time.Second)})
	}
	h := cm.history
	if len(h) > historyCap || !h[0].Time.Equal(at) || h[len(h)-1].Time.Before(at.Add(historyCap*time.Second)) {
		t.Fatalf("%d samples from %v to %v", len(h), h[0].Time, h[len(h)-1].Time)
	}
}

// TestNoticesOnTheTimeline: a worker's eviction notice and a server's
// (riding its leave) are on the timeline with their source and deadline
// before the drain they cause; a notice that names no worker is refused.
func TestNoticesOnTheTimeline(t *testing.T) {
	c := New(Options{Servers: 2, Workers: 1, Partitions: 2})
	cl := serve(t, c)
	ctx := t.Context()
	for _, s := range []string{"s0", "s1"} {
		if _, err := cl.JoinServer(ctx, s, "127.0.0.1:1", ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.JoinWorker(ctx, "w0", ""); err != nil {
		t.Fatal(err)
	}
	deadline := time.Date(2026, 1, 1, 12, 0, 3, 0, time.UTC)
	if err := cl.Notice(ctx, api.Notice{Role: api.RoleWorker, ID: "w0", Source: "aws", Detail: "spot/instance-action", Deadline: deadline}); err != nil {
		t.Fatal(err)
	}
	if err := cl.Notice(ctx, api.Notice{Role: api.RoleServer, ID: "s0", Source: "aws"}); !errors.Is(err, api.ErrBadRequest) {
		t.Fatalf("a server's notice on the workers' route: %v", err)
	}
	if _, err := cl.DrainServer(ctx, "s1", api.Notice{Source: "signal", Detail: "received terminated"}); err != nil {
		t.Fatal(err)
	}
	evs, err := cl.Events(ctx, 3, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"notice w0", "notice s1", "drain s1"}; !slices.Equal(kinds(evs), want) {
		t.Fatalf("events %v, want %v", kinds(evs), want)
	}
	if got, want := evs[0].Cause, "eviction notice from aws (spot/instance-action): leaving by 12:00:03.000"; got != want {
		t.Errorf("worker's notice: %q, want %q", got, want)
	}
	if got, want := evs[1].Cause, "eviction notice from signal (received terminated)"; got != want {
		t.Errorf("server's notice: %q, want %q", got, want)
	}
}

// printLost prints what the status says of slots that lost every copy
// (testdata/copies.txt), each loss with the slots of the first 1024 it
// names checked against its arcs.
func (h *harness) printLost() {
	st := h.m.Status()
	fmt.Fprintf(&h.out, "copies lost %d times\n", st.CopiesLost)
	for _, l := range st.SlotLosses {
		var arcs []copies.Arc
		for _, a := range l.Arcs {
			arcs = append(arcs, copies.Arc{Lo: a.Lo, Hi: a.Hi})
		}
		if got := copies.SpreadSlots(arcs); len(got) != l.SpreadCount {
			h.t.Errorf("loss at v%d: %d spread slots in its arcs, it says %d", l.Version, len(got), l.SpreadCount)
		}
		fmt.Fprintf(&h.out, "v%d epoch %d: servers %v held the copies of %d slots of the first 1024 (%s), %.1f%% of the ring\n",
			l.Version, l.Epoch, l.Servers, l.SpreadCount, l.Spread, 100*l.Share)
	}
	if st.Rewinds > 0 {
		fmt.Fprintf(&h.out, "rewound %d times: %s\n", st.Rewinds, st.LastRewind)
	}
}

// TestClockSpreadAtOneInstant: workers report their clocks at different
// moments, so the spread of the last clocks as reported counted the time
// between reports: two workers in step, ticking a thousand clocks a
// second, showed 100 clocks apart from reports 100 ms apart (walk6: 0 to
// 50 from one poll to the next under SSP(2)). Interpolated to the latest
// instant every worker has reported by, they are 0 apart; a worker that
// stands still is still seen behind.
func TestClockSpreadAtOneInstant(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	m := &Machine{}
	note := func(rank int, clock int64, at time.Time) { m.now = at; m.noteClock(rank, clock, true) }
	note(0, 0, ms(0))
	note(1, 100, ms(100))
	note(0, 200, ms(200))
	note(1, 300, ms(300))
	if got := m.clockSpread([]int{0, 1}); got != 0 {
		t.Errorf("in step: spread %d, want 0 (as reported: %d)", got, m.clocks[1][1].clock-m.clocks[0][1].clock)
	}
	note(2, 50, ms(100))
	note(2, 50, ms(300))
	if got := m.clockSpread([]int{0, 1, 2}); got != 150 {
		t.Errorf("rank 2 standing at 50: spread %d, want 150 (rank 0 at 200 by 200 ms)", got)
	}
	if got := m.clockSpread([]int{0}); got != 0 {
		t.Errorf("one worker: spread %d, want 0", got)
	}
}
