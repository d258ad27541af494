package coordha_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/coord"
	"github.com/terrace-ml/terrace/layout"
	"github.com/terrace-ml/terrace/meta"
	"github.com/terrace-ml/terrace/node"
	"github.com/terrace-ml/terrace/ps"
)

// TestMembersAndEpochsInEtcd runs a coordinator on an embedded etcd
// member with real server and worker nodes over TCP. Every node registers
// under its own lease; the end of a registration (here an eviction, which
// revokes the lease, as its expiry would) takes the node out; every epoch
// is the etcd revision of the write that saved it, and the placement key
// carries it; a new leader goes on from it.
func TestMembersAndEpochsInEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e, err := meta.StartEmbedded(ctx, meta.EmbedConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	st, err := meta.Open(ctx, e.Endpoints(), "/state-test")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	opts := coord.Options{Servers: 2, Workers: 1, Partitions: 2, Replication: 2}
	actx, stopA := context.WithCancel(ctx)
	addr, doneA := replicaWith(actx, t, "a", e.Endpoints(), opts)
	nctx, stopNodes := context.WithCancel(ctx)
	defer stopNodes()
	nodes := make(chan error, 8)
	server := func(id string) {
		go func() {
			nodes <- node.RunServer(nctx, node.ServerConfig{ID: id, Listen: "127.0.0.1:0", Coordinator: addr})
		}()
	}
	server("s0")
	server("s1")
	go func() {
		_, err := node.RunWorker(nctx, node.WorkerConfig{ID: "w0", Coordinator: addr}, func(ctx context.Context, _ *ps.Client) (any, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
		nodes <- err
	}()
	cl := coord.NewClient(addr)
	lay := awaitLayout(ctx, t, cl, 0, "ready with 2 servers", func(l *layout.Layout) bool { return l.Ready && len(l.Servers) == 2 })
	awaitMembers(ctx, t, st, coord.RoleServer, "s0", "s1")
	awaitMembers(ctx, t, st, coord.RoleWorker, "w0")
	checkEpoch(ctx, t, st, lay)
	if lay.Membership == nil || len(lay.Membership.Endpoints) == 0 {
		t.Fatalf("layout names no etcd to register in: %+v", lay.Membership)
	}

	// A server's registration ends: it leaves the ring in a new epoch.
	evicted := time.Now()
	if err := st.Evict(ctx, coord.RoleServer, "s1"); err != nil {
		t.Fatal(err)
	}
	prev := lay.Epoch
	lay = awaitLayout(ctx, t, cl, lay.Version, "s1 off the ring", func(l *layout.Layout) bool { return len(l.Servers) == 1 })
	t.Logf("s1 off the ring %v after its registration ended", time.Since(evicted))
	if lay.Servers[0].ID != "s0" || lay.PrevEpoch != prev || lay.Epoch <= prev {
		t.Fatalf("after s1's eviction: servers %v, epoch %d after %d; want s0 alone, after epoch %d", lay.Servers, lay.Epoch, lay.PrevEpoch, prev)
	}
	checkEpoch(ctx, t, st, lay)

	// A worker's: its rank is finished.
	if err := st.Evict(ctx, coord.RoleWorker, "w0"); err != nil {
		t.Fatal(err)
	}
	lay = awaitLayout(ctx, t, cl, lay.Version, "rank 0 finished", func(l *layout.Layout) bool { return slices.Contains(l.Finished, 0) })

	// A new leader restores the epoch from etcd, and the next epoch it
	// saves follows it.
	stopA()
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	addr, _ = replicaWith(ctx, t, "b", e.Endpoints(), opts)
	cl = coord.NewClient(addr)
	restored := awaitLayout(ctx, t, cl, 0, "the restored layout", func(*layout.Layout) bool { return true })
	if restored.Epoch != lay.Epoch {
		t.Fatalf("restored epoch %d, want %d", restored.Epoch, lay.Epoch)
	}
	if _, err := cl.JoinServer(ctx, "s0", "127.0.0.1:1"); err != nil { // a new address: a new epoch
		t.Fatal(err)
	}
	next := awaitLayout(ctx, t, cl, restored.Version, "a new epoch", func(l *layout.Layout) bool { return l.Epoch != restored.Epoch })
	if next.PrevEpoch != restored.Epoch || next.Epoch <= restored.Epoch {
		t.Fatalf("epoch %d after %d, want one after %d", next.Epoch, next.PrevEpoch, restored.Epoch)
	}
	checkEpoch(ctx, t, st, next)
	stopNodes()
	for range 3 {
		<-nodes
	}
}

// checkEpoch checks that l's epoch is the placement's revision in etcd,
// and that the placement lists l's servers.
func checkEpoch(ctx context.Context, t *testing.T, st *meta.Store, l *layout.Layout) {
	t.Helper()
	p, epoch, err := st.Placement(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if epoch != l.Epoch || !slices.Equal(p.Servers, l.Servers) {
		t.Fatalf("placement at revision %d with servers %v; layout epoch %d with %v", epoch, p.Servers, l.Epoch, l.Servers)
	}
}

func awaitLayout(ctx context.Context, t *testing.T, cl *coord.Client, after uint64, what string, ok func(*layout.Layout) bool) *layout.Layout {
	t.Helper()
	for {
		l, err := cl.Layout(ctx, after)
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok(l) {
			return l
		}
		after = l.Version
	}
}

func awaitMembers(ctx context.Context, t *testing.T, st *meta.Store, role string, ids ...string) {
	t.Helper()
	for {
		m, _, err := st.Members(ctx, role)
		if err != nil {
			t.Fatal(err)
		}
		all := true
		for _, id := range ids {
			all = all && m[id].Labels[layout.IncarnationLabel] != ""
		}
		if all {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s members %v, want %v registered with their incarnations", role, m, ids)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
