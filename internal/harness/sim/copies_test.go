package sim_test

import (
	"slices"
	"testing"

	"github.com/terrace-ml/terrace/internal/harness/sim"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
)

func lay(version uint64, ids ...string) *layout.Layout {
	l := &layout.Layout{Version: version, Epoch: version, Replication: 2, Ready: true}
	for _, id := range ids {
		l.Servers = append(l.Servers, ring.Server{ID: id, Addr: id})
	}
	return l
}

// slotOn returns a slot whose chain on the ring of ids is head, next.
func slotOn(t *testing.T, head, next string, ids ...string) uint64 {
	t.Helper()
	rm, err := lay(1, ids...).Ring()
	if err != nil {
		t.Fatal(err)
	}
	for sl := range uint64(10000) {
		if c := rm.Chain(sl, 2, nil); rm.Servers[c[0]].ID == head && rm.Servers[c[1]].ID == next {
			return sl
		}
	}
	t.Fatalf("no slot on %s, %s", head, next)
	return 0
}

// TestCopiesSecondDeathBeforeRebuild: a slot on a and b loses every copy
// when b dies after a, unless the new member's copy was complete first.
func TestCopiesSecondDeathBeforeRebuild(t *testing.T) {
	for _, rebuilt := range []bool{false, true} {
		b := sim.NewBook(nil)
		c := sim.NewCopies(b.Mark)
		must(t, c.Layout(lay(1, "a", "b", "c")))
		sl := slotOn(t, "a", "b", "a", "b", "c")
		c.Touch(sl)
		if h := c.Holders(sl); !slices.Equal(h, []string{"a", "b"}) {
			t.Fatalf("holders %v, want a b", h)
		}
		c.Died("a")
		if !c.WouldLose("b") || c.WouldLose("c") {
			t.Errorf("after a's death: b would lose %v, c %v; want true, false", c.WouldLose("b"), c.WouldLose("c"))
		}
		must(t, c.Layout(lay(2, "b", "c"))) // b heads the slot, c is new to it
		if h := c.Holders(sl); !slices.Equal(h, []string{"b"}) {
			t.Fatalf("holders before c's copy %v, want b", h)
		}
		if rebuilt {
			c.Rebuilt("c", 2) // c heads nothing of this slot: no effect
			c.Rebuilt("b", 2)
		}
		c.Died("b")
		lost := c.LossBefore(sl, b.Mark()) > 0
		if lost == rebuilt {
			t.Errorf("rebuilt %v: lost %v, holders %v", rebuilt, lost, c.Holders(sl))
		}
		if lost {
			if l := c.Lost(); !slices.Equal(l, []uint64{sl}) {
				t.Errorf("Lost() = %v, want [%d]", l, sl)
			}
			// The slot starts again at its next live head.
			must(t, c.Layout(lay(3, "c")))
			if h := c.Holders(sl); !slices.Equal(h, []string{"c"}) {
				t.Errorf("holders after the loss %v, want c", h)
			}
		}
	}
}

// TestCopiesLayoutAndReports: a server off the chain holds nothing more,
// even alive; a dead server's report and a report for a layout never seen
// count for nothing.
func TestCopiesLayoutAndReports(t *testing.T) {
	b := sim.NewBook(nil)
	c := sim.NewCopies(b.Mark)
	must(t, c.Layout(lay(1, "a", "b", "c")))
	sl := slotOn(t, "a", "b", "a", "b", "c")
	c.Touch(sl)
	must(t, c.Layout(lay(2, "a", "c"))) // b declared dead, still running
	if h := c.Holders(sl); !slices.Equal(h, []string{"a"}) {
		t.Fatalf("holders %v, want a", h)
	}
	c.Rebuilt("a", 7)
	if c.Unknown() != 1 || len(c.Holders(sl)) != 1 {
		t.Errorf("unknown %d, holders %v after a report for a layout never seen", c.Unknown(), c.Holders(sl))
	}
	c.Died("a")
	c.Rebuilt("a", 2)
	if c.LossBefore(sl, b.Mark()) == 0 {
		t.Errorf("the slot's last holder died and a report came after: holders %v", c.Holders(sl))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
