package coord

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
)

// TestEpochIsTheSavesNumber: under etcd an epoch is the revision of the
// save that began it, which is not contiguous with the last; the layout
// names the epoch it follows, and a restored coordinator goes on from the
// number the save got.
func TestEpochIsTheSavesNumber(t *testing.T) {
	var saved []byte
	rev := uint64(100)
	var epochs []uint64
	c := New(Options{Servers: 2, Workers: 1, Replication: 2})
	c.SetPersist(func(_ context.Context, b []byte, l *layout.Layout) (uint64, error) {
		saved = append(saved[:0], b...)
		rev += 7 // other writes come between
		if l == nil {
			return 0, nil
		}
		epochs = append(epochs, rev)
		return rev, nil
	})
	ctx := context.Background()
	c.JoinServer("s0", "a:1")
	c.JoinServer("s1", "a:2")
	c.JoinWorker("w0")
	l, _ := c.Layout(ctx, 0)
	if len(epochs) != 2 || l.Epoch != epochs[1] || l.PrevEpoch != epochs[0] {
		t.Fatalf("layout epoch %d after %d; saves numbered epochs %v", l.Epoch, l.PrevEpoch, epochs)
	}
	c.RemoveServer("s1", "")
	l, _ = c.Layout(ctx, l.Version)
	if l.Epoch != epochs[2] || l.PrevEpoch != epochs[1] {
		t.Fatalf("after a removal: epoch %d after %d; saves numbered %v", l.Epoch, l.PrevEpoch, epochs)
	}
	// The save that began the epoch did not know its number: the restore
	// is told it.
	n := New(Options{Servers: 2, Workers: 1, Replication: 2})
	if err := n.Restore(saved, l.Epoch); err != nil {
		t.Fatal(err)
	}
	if nl, _ := n.Layout(ctx, 0); nl.Epoch != l.Epoch || nl.PrevEpoch != l.PrevEpoch {
		t.Fatalf("restored epoch %d after %d, want %d after %d", nl.Epoch, nl.PrevEpoch, l.Epoch, l.PrevEpoch)
	}

	// An epoch numbered below the last is refused, and its layout is
	// shown to no one.
	n.SetPersist(func(_ context.Context, b []byte, p *layout.Layout) (uint64, error) {
		if p != nil {
			return 5, nil
		}
		return 0, nil
	})
	before, _ := n.Layout(ctx, 0)
	n.JoinServer("s0", "a:9") // a new address: a new epoch
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if got, err := n.Layout(wctx, before.Version); !errors.Is(err, ErrNotPersisted) {
		t.Fatalf("a layout whose save failed: %+v, %v; want ErrNotPersisted", got, err)
	}
}

// TestMemberGone: the end of a node's registration takes it out only if it
// is the incarnation that joined last and the coordinator's own check
// confirms it: a worker silent for half the failure timeout, a server
// that does not answer a dial.
func TestMemberGone(t *testing.T) {
	c := New(Options{Servers: 3, Workers: 2, Replication: 2})
	ctx := context.Background()
	for _, s := range []string{"s0", "s1", "s2"} {
		// Nothing listens on port 1: a dial fails at once.
		if _, err := c.JoinServerAs(s, "127.0.0.1:1", "i-"+s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.JoinWorkerAs("w0", "old"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.JoinWorkerAs("w1", "w1a"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	// w0 restarts and joins again before its old lease expires.
	if r, err := c.JoinWorkerAs("w0", "new"); err != nil || r != 0 {
		t.Fatalf("rejoin: rank %d, %v", r, err)
	}
	if c.MemberGone(ctx, RoleWorker, "w0", "old") {
		t.Fatal("the old incarnation's registration ending finished the new one")
	}
	if c.MemberGone(ctx, RoleWorker, "w0", "") || c.MemberGone(ctx, RoleServer, "w0", "new") {
		t.Fatal("a registration without an incarnation, or of another role, finished w0")
	}

	// w1 lost its registration but heartbeats: it stays.
	stop := make(chan struct{})
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		for {
			c.Heartbeat(1)
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	kept := !c.MemberGone(ctx, RoleWorker, "w1", "w1a")
	close(stop)
	<-beating
	if !kept {
		t.Fatal("w1 heartbeats, and its registration's end finished it")
	}

	// w0 is silent: it goes, and its lease returns to the pool.
	c.mu.Lock()
	delete(c.beats, 0)
	c.mu.Unlock()
	if !c.MemberGone(ctx, RoleWorker, "w0", "new") {
		t.Fatal("w0's registration ended, it is silent, and it was not finished")
	}
	l, _ := c.Layout(ctx, 0)
	if !slices.Contains(l.Finished, 0) || slices.Contains(l.Finished, 1) {
		t.Fatalf("finished %v, want rank 0 alone", l.Finished)
	}
	if p := c.work[0].parts[0]; p.rank != -1 {
		t.Fatalf("partition 0 leased to rank %d, want the pool", p.rank)
	}
	if c.MemberGone(ctx, RoleWorker, "w0", "new") {
		t.Fatal("a second end of the same registration changed the layout")
	}

	if !c.MemberGone(ctx, RoleServer, "s1", "i-s1") {
		t.Fatal("s1's registration ended, it does not answer, and it stayed")
	}
	l, _ = c.Layout(ctx, 0)
	if len(l.Servers) != 2 || slices.ContainsFunc(l.Servers, func(s ring.Server) bool { return s.ID == "s1" }) {
		t.Fatalf("servers %v after s1 went", l.Servers)
	}
}

// TestFailureTimeoutConfigurable: a worker silent for longer than
// Options.FailureTimeout is declared dead, and not before; the layout
// tells workers the timeout, so that they heartbeat often enough.
func TestFailureTimeoutConfigurable(t *testing.T) {
	for _, tc := range []struct {
		timeout, silent time.Duration
		dead            bool
	}{
		{0, 700 * time.Millisecond, false}, // the default, 1 s
		{0, 1200 * time.Millisecond, true},
		{300 * time.Millisecond, 400 * time.Millisecond, true},
		{3 * time.Second, 2 * time.Second, false},
	} {
		c := New(Options{Servers: 1, Workers: 1, FailureTimeout: tc.timeout})
		c.JoinServer("s0", "a:1")
		c.JoinWorker("w0")
		if err := c.Heartbeat(0); err != nil {
			t.Fatal(err)
		}
		l, _ := c.Layout(context.Background(), 0)
		if l.FailureTimeoutMillis != tc.timeout.Milliseconds() {
			t.Errorf("timeout %v: layout says %d ms", tc.timeout, l.FailureTimeoutMillis)
		}
		c.mu.Lock()
		c.beats[0] = time.Now().Add(-tc.silent)
		c.mu.Unlock()
		c.expireWorkers()
		l, _ = c.Layout(context.Background(), 0)
		if dead := slices.Contains(l.Finished, 0); dead != tc.dead {
			t.Errorf("timeout %v, silent %v: declared dead %v, want %v", tc.timeout, tc.silent, dead, tc.dead)
		}
	}
}
