package server

import (
	"testing"

	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/table"
)

// TestNextJob: a server that installs a layout of the next job drops the
// old job's tables and counts every worker from clock 0 again, finished
// ones included, so that the next job sees neither the old clocks nor
// the old weights.
func TestNextJob(t *testing.T) {
	spec := table.Spec{Name: "w", Width: 1}
	servers := []ring.Server{{ID: "s0", Addr: "127.0.0.1:1"}}
	s := New(Options{ID: "s0"})
	first := &layout.Layout{Version: 1, Epoch: 3, Workers: 2, Ready: true, Servers: servers,
		Tables: []layout.Table{{ID: 1, Spec: spec}}}
	if err := s.Configure(first); err != nil {
		t.Fatal(err)
	}
	if _, err := s.advanceClock(0, 7); err != nil {
		t.Fatal(err)
	}
	done := *first
	done.Version, done.Finished, done.JobDone = 2, []int{1}, true
	if err := s.Configure(&done); err != nil {
		t.Fatal(err)
	}
	if got := s.minClock(); got != 7 {
		t.Fatalf("first job: min clock %d, want 7 (rank 1 finished)", got)
	}

	next := &layout.Layout{Version: 3, Epoch: 4, PrevEpoch: 3, Job: 1, Workers: 2, Servers: servers,
		Tables: []layout.Table{{ID: 2, Spec: spec}}}
	if err := s.Configure(next); err != nil {
		t.Fatal(err)
	}
	if _, _, old, _ := s.target(1); old != nil {
		t.Fatal("the old job's table 1 is still served")
	}
	if _, _, cur, _ := s.target(2); cur == nil {
		t.Fatal("the next job's table 2 is missing")
	}
	for w := range 2 {
		if got := s.clockOf(w); got != 0 {
			t.Fatalf("rank %d counted at clock %d in the next job, want 0", w, got)
		}
	}
	if got := s.minClock(); got != 0 {
		t.Fatalf("next job: min clock %d, want 0", got)
	}
	counted, err := s.advanceClock(1, 1)
	if err != nil || counted != 1 {
		t.Fatalf("rank 1's first clock of the next job counted at %d (%v), want 1", counted, err)
	}
}
