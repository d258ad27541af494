package coordha_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/control/coord"
	"github.com/terrace-ml/terrace/internal/control/meta"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
)

// TestMembersAndEpochsInEtcd runs a coordinator on an embedded etcd
// member with real server and worker nodes over TCP. Every node registers
// under its own lease. A live node whose registration ends (here revoked,
// as an etcd leader's death past the TTL would end it) is kept, and
// registers again; a node that stops is taken out. Every epoch is the
// etcd revision of the write that saved it, and the placement key carries
// it; a new leader goes on from it.
func TestMembersAndEpochsInEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := embedded(ctx, t)
	st, err := meta.Open(ctx, e.Endpoints(), "/state-test")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	opts := coord.Options{Servers: 2, Workers: 1, Partitions: 2, Replication: 2}
	actx, stopA := context.WithCancel(ctx)
	addr, doneA := replicaWith(actx, t, "a", e.Endpoints(), opts)
	type proc struct {
		stop context.CancelFunc
		done chan error
	}
	start := func(run func(ctx context.Context) error) proc {
		pctx, stop := context.WithCancel(ctx)
		p := proc{stop, make(chan error, 1)}
		go func() { p.done <- run(pctx) }()
		return p
	}
	server := func(id string) proc {
		return start(func(ctx context.Context) error {
			return node.RunServer(ctx, node.ServerConfig{ID: id, Listen: "127.0.0.1:0", Coordinator: addr})
		})
	}
	s0, s1 := server("s0"), server("s1")
	w0 := start(func(ctx context.Context) error {
		_, err := node.RunWorker(ctx, node.WorkerConfig{ID: "w0", Coordinator: addr}, func(ctx context.Context, _ *ps.Client) (any, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
		return err
	})
	cl := api.NewClient(addr, nil)
	lay := awaitLayout(ctx, t, cl, 0, "ready with 2 servers", func(l *layout.Layout) bool { return l.Ready && len(l.Servers) == 2 })
	revs := awaitMembers(ctx, t, st, api.RoleServer, nil, "s0", "s1")
	awaitMembers(ctx, t, st, api.RoleWorker, nil, "w0")
	checkEpoch(ctx, t, st, lay)
	if lay.Membership == nil || len(lay.Membership.Endpoints) == 0 {
		t.Fatalf("layout names no etcd to register in: %+v", lay.Membership)
	}

	// Live nodes whose registrations end: kept, and registered again.
	if err := st.Evict(ctx, api.RoleServer, "s1"); err != nil {
		t.Fatal(err)
	}
	if err := st.Evict(ctx, api.RoleWorker, "w0"); err != nil {
		t.Fatal(err)
	}
	awaitMembers(ctx, t, st, api.RoleServer, revs, "s1")
	// MemberGone decides within a failure timeout (1 s): a worker after
	// half of it, a server after one dial.
	time.Sleep(2 * coord.DefaultFailureTimeout)
	if l, err := cl.Layout(ctx, 0); err != nil || len(l.Servers) != 2 || len(l.Finished) != 0 {
		t.Fatalf("after live nodes lost their registrations: %+v, %v; want both servers on the ring and no rank finished", l, err)
	}

	// A server that stops leaves the ring in a new epoch, numbered by etcd.
	s1.stop()
	<-s1.done
	prev := lay.Epoch
	lay = awaitLayout(ctx, t, cl, lay.Version, "s1 off the ring", func(l *layout.Layout) bool { return len(l.Servers) == 1 })
	if lay.Servers[0].ID != "s0" || lay.PrevEpoch != prev || lay.Epoch <= prev {
		t.Fatalf("after s1 stopped: servers %v, epoch %d after %d; want s0 alone, after epoch %d", lay.Servers, lay.Epoch, lay.PrevEpoch, prev)
	}
	checkEpoch(ctx, t, st, lay)

	// A worker that stops: its rank is finished.
	w0.stop()
	<-w0.done
	lay = awaitLayout(ctx, t, cl, lay.Version, "rank 0 finished", func(l *layout.Layout) bool { return slices.Contains(l.Finished, 0) })

	// A new leader restores the epoch from etcd, and the next epoch it
	// saves follows it.
	stopA()
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	addr, _ = replicaWith(ctx, t, "b", e.Endpoints(), opts)
	cl = api.NewClient(addr, nil)
	restored := awaitLayout(ctx, t, cl, 0, "the restored layout", func(*layout.Layout) bool { return true })
	if restored.Epoch != lay.Epoch {
		t.Fatalf("restored epoch %d, want %d", restored.Epoch, lay.Epoch)
	}
	if _, err := cl.JoinServer(ctx, "s0", "127.0.0.1:1", ""); err != nil { // a new address: a new epoch
		t.Fatal(err)
	}
	next := awaitLayout(ctx, t, cl, restored.Version, "a new epoch", func(l *layout.Layout) bool { return l.Epoch != restored.Epoch })
	if next.PrevEpoch != restored.Epoch || next.Epoch <= restored.Epoch {
		t.Fatalf("epoch %d after %d, want one after %d", next.Epoch, next.PrevEpoch, restored.Epoch)
	}
	checkEpoch(ctx, t, st, next)
	s0.stop()
	<-s0.done
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

func awaitLayout(ctx context.Context, t *testing.T, cl *api.Client, after uint64, what string, ok func(*layout.Layout) bool) *layout.Layout {
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

// awaitMembers waits until every one of ids is registered as role with an
// incarnation, in a registration newer than the one at revision before[id]
// (nil: any), and returns the registrations' revisions.
func awaitMembers(ctx context.Context, t *testing.T, st *meta.Store, role string, before map[string]int64, ids ...string) map[string]int64 {
	t.Helper()
	for {
		revs := map[string]int64{}
		for _, id := range ids {
			info, rev, err := st.Member(ctx, role, id)
			if err != nil && !errors.Is(err, meta.ErrNotFound) {
				t.Fatal(err)
			}
			if err == nil && info.Labels[layout.IncarnationLabel] != "" && rev > before[id] {
				revs[id] = rev
			}
		}
		if len(revs) == len(ids) {
			return revs
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s members registered: %v, want %v", role, revs, ids)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
