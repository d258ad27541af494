package coord

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/placement/layout"
)

// stateCluster is a coordinator with one server and two workers, its state
// saved into *saved after every change.
func stateCluster(t *testing.T, o Options, saved *[]byte) *Coordinator {
	t.Helper()
	o.Servers, o.Workers = 1, 2
	c, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	c.SetPersist(func(_ context.Context, b []byte, _ *layout.Layout) (uint64, error) {
		*saved = append((*saved)[:0], b...)
		return 0, nil
	})
	c.JoinServer("s0", "127.0.0.1:1")
	c.JoinWorker("w0")
	c.JoinWorker("w1")
	return c
}

// TestStateMovesWithLease: the state a worker reports with its offset is
// what the partition's next holder gets with its grant; a deposed holder's
// late report, and a report overtaken by a later one, change nothing.
func TestStateMovesWithLease(t *testing.T) {
	var saved []byte
	c := stateCluster(t, Options{Partitions: 2}, &saved)
	hs := httptest.NewServer(c.Handler())
	defer hs.Close()
	cl := NewClient(hs.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	g, err := cl.Acquire(ctx, 0, 0)
	if err != nil || g.Partition != 0 || g.State != 0 {
		t.Fatalf("first grant %+v %v: want partition 0 without state", g, err)
	}
	v1, err := cl.Progress(ctx, Update{Rank: 0, Partition: 0, Offset: 10, State: []byte("rows<10"), HasState: true})
	if err != nil || v1 == 0 {
		t.Fatalf("progress with state: version %d, %v", v1, err)
	}
	v2, err := cl.Progress(ctx, Update{Rank: 0, Partition: 0, Offset: 20, State: []byte("rows<20"), HasState: true})
	if err != nil || v2 <= v1 {
		t.Fatalf("second progress: version %d (after %d), %v", v2, v1, err)
	}
	if _, err := cl.State(ctx, 0, v1); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("superseded version %d: %v, want ErrLeaseLost", v1, err)
	}
	if _, err := c.states.GetState(ctx, 0, v1); !errors.Is(err, ErrNoState) {
		t.Fatalf("superseded version %d still stored: %v", v1, err)
	}
	// A report for an earlier offset that arrives late keeps neither.
	if v, err := cl.Progress(ctx, Update{Rank: 0, Partition: 0, Offset: 15, State: []byte("rows<15"), HasState: true}); err != nil || v != v2 {
		t.Fatalf("late lower report: version %d, %v; want %d kept", v, err, v2)
	}
	if _, err := cl.Progress(ctx, Update{Rank: 0, Partition: 0, Offset: 1, State: make([]byte, MaxStateBytes+1), HasState: true}); err == nil {
		t.Fatal("an oversized state was accepted")
	}

	// Worker 0 is gone; worker 1 takes partition 0 over with its state.
	c.ReleaseWorker(0)
	g, err = cl.Acquire(ctx, 1, 0)
	if err == nil && g.Partition == 1 { // its own partition first
		if _, err := cl.Progress(ctx, Update{Rank: 1, Partition: 1, Complete: true}); err != nil {
			t.Fatal(err)
		}
		g, err = cl.Acquire(ctx, 1, 0)
	}
	if err != nil || g.Partition != 0 || g.Offset != 20 || g.State != v2 {
		t.Fatalf("takeover grant %+v %v: want partition 0 at offset 20 with state %d", g, err, v2)
	}
	if blob, err := cl.State(ctx, 0, g.State); err != nil || string(blob) != "rows<20" {
		t.Fatalf("state fetched by the new holder: %q %v", blob, err)
	}
	if _, err := cl.Progress(ctx, Update{Rank: 0, Partition: 0, Offset: 30, State: []byte("late"), HasState: true}); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("deposed holder's report: %v, want ErrLeaseLost", err)
	}
	v3, err := cl.Progress(ctx, Update{Rank: 1, Partition: 0, Offset: 40, State: []byte("rows<40"), HasState: true, Complete: true})
	if err != nil || v3 <= v2 {
		t.Fatalf("completion with state: %d %v", v3, err)
	}

	// A standby restores the saved state: versions come with it, and new
	// ones do not collide with them.
	n := New(Options{Servers: 1, Workers: 2, Partitions: 2})
	if err := n.Restore(saved, 0); err != nil {
		t.Fatal(err)
	}
	if got := n.StateVersions(); got[0] != v3 {
		t.Fatalf("restored versions %v, want partition 0 at %d", got, v3)
	}
	if err := n.SetStateStore(ctx, c.states); err != nil { // the store outlives the leader, as etcd does
		t.Fatal(err)
	}
	g, err = n.Acquire(ctx, 1, 1)
	if err == nil && g.Partition != 0 {
		n.Progress(ctx, Update{Rank: 1, Epoch: 1, Partition: g.Partition, Complete: true})
		g, err = n.Acquire(ctx, 1, 1)
	}
	if err != nil || g.Partition != 0 || g.Offset != 0 || g.State != v3 {
		t.Fatalf("next epoch's grant after failover %+v %v: want partition 0 from 0 with state %d", g, err, v3)
	}
	if v, err := n.Progress(ctx, Update{Rank: 1, Epoch: 1, Partition: 0, Offset: 5, State: []byte("e1"), HasState: true}); err != nil || v <= v3 {
		t.Fatalf("first version after failover: %d %v, want above %d", v, err, v3)
	}
}

// TestCheckpointCarriesStates: a checkpoint holds every partition's state;
// a resume hands it out again, and a damaged state file makes the resume
// fall back to the previous checkpoint.
func TestCheckpointCarriesStates(t *testing.T) {
	dir := t.TempDir()
	var saved []byte
	c := stateCluster(t, Options{Partitions: 2, CheckpointDir: dir, CheckpointEvery: 1}, &saved)
	ctx := context.Background()
	epoch := func(e int, state string) {
		t.Helper()
		for rank := range 2 {
			g, err := c.Acquire(ctx, rank, e)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Progress(ctx, Update{Rank: rank, Epoch: e, Partition: g.Partition, Offset: 10, Complete: true,
				State: []byte(state), HasState: true}); err != nil {
				t.Fatal(err)
			}
		}
		l, _ := c.Layout(ctx, 0)
		if l.Checkpoint == nil {
			t.Fatalf("no checkpoint after epoch %d", e)
		}
		if err := c.Checkpointed("s0", l.Checkpoint.Seq, ""); err != nil {
			t.Fatal(err)
		}
	}
	epoch(0, "after-0")
	epoch(1, "after-1")
	if cs := c.Checkpoints(); len(cs) != 2 {
		t.Fatalf("checkpoints %+v", cs)
	}
	resume := func() map[string]bool {
		t.Helper()
		r, err := Open(Options{Servers: 1, Workers: 2, Partitions: 2, CheckpointDir: dir, Resume: true})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for p, ver := range r.StateVersions() {
			b, err := r.State(ctx, p, ver)
			if err != nil {
				t.Fatal(err)
			}
			got[string(b)] = true
		}
		return got
	}
	if got := resume(); len(got) != 1 || !got["after-1"] {
		t.Fatalf("resumed states %v, want both partitions after-1", got)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "partstate-*"))
	if len(files) != 2 {
		t.Fatalf("state files %v", files)
	}
	b, _ := os.ReadFile(files[1])
	b[len(b)/2] ^= 0xff
	os.WriteFile(files[1], b, 0o644)
	if got := resume(); len(got) != 1 || !got["after-0"] {
		t.Fatalf("after damaging the newest state file, resumed states %v; want the previous checkpoint's", got)
	}
}

// TestReportsNameTheirGrant: a worker restarted under its old ID gets its
// rank and its unfinished partition again; a report its previous
// incarnation sent under the earlier grant is refused.
func TestReportsNameTheirGrant(t *testing.T) {
	var saved []byte
	c := stateCluster(t, Options{Partitions: 2}, &saved)
	ctx := context.Background()
	old, err := c.Acquire(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Acquire(ctx, 0, 0) // the restarted worker asks
	if err != nil || again.Partition != old.Partition || again.Lease == old.Lease {
		t.Fatalf("grant again %+v (first %+v) %v: want the same partition under a new grant", again, old, err)
	}
	late := Update{Rank: 0, Partition: old.Partition, Offset: 50, Lease: old.Lease, State: []byte("old life"), HasState: true}
	if _, err := c.Progress(ctx, late); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("report under the earlier grant: %v, want ErrLeaseLost", err)
	}
	if _, err := c.Progress(ctx, Update{Rank: 0, Partition: old.Partition, Offset: 5, Lease: again.Lease}); err != nil {
		t.Fatal(err)
	}
	n := New(Options{Servers: 1, Workers: 2, Partitions: 2})
	if err := n.Restore(saved, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Progress(ctx, late); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("after a failover, report under the earlier grant: %v, want ErrLeaseLost", err)
	}
	if _, err := n.Progress(ctx, Update{Rank: 0, Partition: old.Partition, Offset: 9, Lease: again.Lease}); err != nil {
		t.Fatalf("after a failover, report under the current grant: %v", err)
	}
}
