package coordha_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/control/coord"
	"github.com/terrace-ml/terrace/internal/control/coordha"
	"github.com/terrace-ml/terrace/internal/control/meta"
	"github.com/terrace-ml/terrace/internal/storage/checkpoint"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// replica runs one coordinator replica on etcd at endpoints until its
// context ends, and returns the address it listens on once it leads.
func replica(ctx context.Context, t testing.TB, id string, endpoints []string) (string, <-chan error) {
	t.Helper()
	// The workers of these tests do not heartbeat: a long failure timeout
	// keeps them alive through slow etcd writes on a loaded machine.
	return replicaWith(ctx, t, id, endpoints, coord.Options{Servers: 1, Workers: 1, Partitions: 2, FailureTimeout: time.Minute})
}

// replicaWith is replica with options o.
func replicaWith(ctx context.Context, t testing.TB, id string, endpoints []string, o coord.Options) (string, <-chan error) {
	t.Helper()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- coordha.Run(ctx, coordha.Config{
			ID: id, Listen: "127.0.0.1:0", Endpoints: endpoints, Prefix: "/state-test",
			Options: o,
			Ready:   func(_ *coord.Coordinator, addr string) { ready <- addr },
		})
	}()
	select {
	case addr := <-ready:
		return addr, done
	case err := <-done:
		t.Fatalf("replica %s: %v", id, err)
	case <-ctx.Done():
		t.Fatalf("replica %s never led", id)
	}
	return "", nil
}

// embedded starts an etcd member for the test, stopped when it ends.
func embedded(ctx context.Context, tb testing.TB) *meta.Embedded {
	tb.Helper()
	e, err := meta.StartEmbedded(ctx, meta.EmbedConfig{Dir: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	return e
}

// leaseOne makes the coordinator at addr ready (a server, a worker) and
// leases the worker a partition of epoch 0.
func leaseOne(ctx context.Context, t testing.TB, addr string) (*api.Client, api.Grant) {
	t.Helper()
	cl := api.NewClient(addr, nil)
	if _, err := cl.JoinServer(ctx, "s0", "127.0.0.1:1", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.JoinWorker(ctx, "w0", ""); err != nil {
		t.Fatal(err)
	}
	g, err := cl.Acquire(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return cl, g
}

// TestStateSurvivesFailover: a partition state of several etcd requests,
// reported to one coordinator, is handed out by the next one after the
// first is gone, and the next one sweeps a version no leader saved.
func TestStateSurvivesFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := embedded(ctx, t)

	actx, stopA := context.WithCancel(ctx)
	addr, doneA := replica(actx, t, "a", e.Endpoints())
	cl, g := leaseOne(ctx, t, addr)
	blob := make([]byte, 2*meta.StateChunk+100)
	for i := range blob {
		blob[i] = byte(rand.N(256))
	}
	pr, err := cl.Progress(ctx, api.Update{Partition: g.Partition, Offset: 7, State: blob, HasState: true})
	if err != nil {
		t.Fatal(err)
	}
	ver := pr.State
	stopA()
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}

	// A leader that wrote a version and died before saving it.
	st, err := meta.Open(ctx, e.Endpoints(), "/state-test")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lead, err := st.Campaign(ctx, "dead-leader")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutPartState(ctx, lead, g.Partition, ver+1, []byte("never saved")); err != nil {
		t.Fatal(err)
	}
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}

	addr, _ = replica(ctx, t, "b", e.Endpoints())
	cl = api.NewClient(addr, nil)
	g2, err := cl.Acquire(ctx, 0, 0)
	if err != nil || g2.Partition != g.Partition || g2.Offset != 7 || len(g2.States) != 1 || g2.States[0] != ver {
		t.Fatalf("grant after failover %+v %v; want partition %d at offset 7 with state %d", g2, err, g.Partition, ver)
	}
	got, err := cl.State(ctx, g2.Partition, ver)
	if err != nil || !bytes.Equal(got, blob) {
		t.Fatalf("state after failover: %d bytes, %v; want the %d reported", len(got), err, len(blob))
	}
	if _, err := st.PartState(ctx, g.Partition, ver+1); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("unsaved version after takeover: %v, want swept (ErrNotFound)", err)
	}
}

// TestPiecesSurviveFailover: a pass of 32,561 partitions (a9a's rows),
// whose pieces as one blob are over the snapshot's 1 MiB (the pass's
// first save failed, and with it the coordinator), is saved a partition
// at a time: a grant's save writes a record or two beside a small blob,
// and the next leader finds the pieces complete, and the one leased, as
// they were.
func TestPiecesSurviveFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := embedded(ctx, t)
	o := coord.Options{Servers: 1, Workers: 1, Partitions: 32561, FailureTimeout: time.Minute}
	actx, stopA := context.WithCancel(ctx)
	addr, doneA := replicaWith(actx, t, "a", e.Endpoints(), o)
	cl, g := leaseOne(ctx, t, addr)
	done := map[int]bool{}
	for range 3 {
		if _, err := cl.Progress(ctx, api.Update{Partition: g.Partition, Offset: 5, Complete: true, Lease: g.Lease}); err != nil {
			t.Fatal(err)
		}
		done[g.Partition] = true
		var err error
		if g, err = cl.Acquire(ctx, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.Progress(ctx, api.Update{Partition: g.Partition, Offset: 3, Lease: g.Lease}); err != nil {
		t.Fatal(err)
	}
	stopA()
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}

	st, err := meta.Open(ctx, e.Endpoints(), "/state-test")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	saved, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(saved.State) > 16<<10 || len(saved.Parts) != 4 {
		t.Fatalf("saved: a blob of %d bytes and %d partition records; want a small blob and the 4 partitions touched", len(saved.State), len(saved.Parts))
	}

	addr, _ = replicaWith(ctx, t, "b", e.Endpoints(), o)
	cl = api.NewClient(addr, nil)
	g2, err := cl.Acquire(ctx, 0, 0)
	if err != nil || g2.Partition != g.Partition || g2.Offset != 3 {
		t.Fatalf("grant after failover %+v %v; want partition %d again, at offset 3", g2, err, g.Partition)
	}
	if _, err := cl.Progress(ctx, api.Update{Partition: g2.Partition, Offset: 5, Complete: true, Lease: g2.Lease}); err != nil {
		t.Fatal(err)
	}
	if g3, err := cl.Acquire(ctx, 0, 0); err != nil || done[g3.Partition] || g3.Partition == g.Partition {
		t.Fatalf("grant %+v %v after failover: a partition completed before (%v)", g3, err, done)
	}
}

// BenchmarkProgressWithState measures a progress report carrying a
// partition state of each size, saved in etcd (an embedded member, fsync
// on), against the same report without state in the same run.
func BenchmarkProgressWithState(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := embedded(ctx, b)
	addr, _ := replica(ctx, b, "bench", e.Endpoints())
	cl, g := leaseOne(ctx, b, addr)
	report := func(n, size int) time.Duration {
		u := api.Update{Partition: g.Partition, Lease: g.Lease, HasState: size >= 0, State: make([]byte, max(size, 0))}
		start := time.Now()
		for i := range n {
			u.Offset = int(start.UnixNano()%1e6) + i // only grows within a run
			if _, err := cl.Progress(ctx, u); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start) / time.Duration(n)
	}
	for _, size := range []int{4 << 10, 256 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("state=%dKiB", size>>10), func(b *testing.B) {
			var with, without time.Duration
			for b.Loop() {
				without += report(5, -1)
				with += report(5, size)
			}
			b.ReportMetric(float64(with.Microseconds())/float64(b.N)/1000, "ms/report")
			b.ReportMetric(float64(without.Microseconds())/float64(b.N)/1000, "ms/report-without-state")
			b.ReportMetric(float64(with)/float64(without), "ratio")
		})
	}
}

// TestListenAddressTaken: a replica whose listen address another process
// holds fails naming it, where it retried in silence for ever.
func TestListenAddressTaken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	defer func(w time.Duration) { *coordha.ListenWait = w }(*coordha.ListenWait)
	*coordha.ListenWait = 100 * time.Millisecond
	e := embedded(ctx, t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	err = coordha.Run(ctx, coordha.Config{ID: "a", Listen: taken.Addr().String(), Endpoints: e.Endpoints(), Prefix: "/taken-test",
		Options: coord.Options{Servers: 1, Workers: 1}})
	if err == nil || !strings.Contains(err.Error(), taken.Addr().String()) || ctx.Err() != nil {
		t.Fatalf("Run on a taken address: %v (context %v), want an error naming it", err, ctx.Err())
	}
}

// TestNextTermListensWhereTheFirstDid: a replica whose etcd session
// lapses (its lease revoked here; a process paused for two seconds on a
// loaded host in the drill that found it) steps down and leads again at
// the address it first got: with --listen HOST:0 every term took a new
// port, the nodes kept dialling the old one, and the job failed.
func TestNextTermListensWhereTheFirstDid(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := embedded(ctx, t)
	addrs := make(chan string, 4)
	stepped := make(chan struct{}, 4)
	done := make(chan error, 1)
	rctx, stop := context.WithCancel(ctx)
	go func() {
		done <- coordha.Run(rctx, coordha.Config{ID: "a", Listen: "127.0.0.1:0", Endpoints: e.Endpoints(), Prefix: "/terms-test",
			Options:     coord.Options{Servers: 1, Workers: 1, FailureTimeout: time.Minute},
			Ready:       func(_ *coord.Coordinator, addr string) { addrs <- addr },
			SteppedDown: func() { stepped <- struct{}{} }})
	}()
	first := <-addrs
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, "/terms-test/election", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("election keys %v: %v", resp, err)
	}
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	select {
	case again := <-addrs:
		// The dashboard view of a replica that stepped down served the
		// old term's API, which refused every read ("state not
		// persisted"): the step-down is told before the next term.
		if len(stepped) != 1 {
			t.Errorf("%d step-downs told before the second term, want 1", len(stepped))
		}
		if again != first {
			t.Errorf("the second term listens on %s, the first on %s", again, first)
		}
		if _, err := api.NewClient(first, nil).Layout(ctx, 0); err != nil {
			t.Errorf("the first address after the second term began: %v", err)
		}
	case err := <-done:
		t.Fatalf("Run ended: %v", err)
	case <-ctx.Done():
		t.Fatal("no second term")
	}
	stop()
	<-done
}

// TestResumeWithNoCheckpoint: a replica started with --resume over a
// checkpoint directory that holds no complete checkpoint (empty, or each
// record damaged) and no saved state fails saying so; it stepped down and
// campaigned again for good, unreachable after one warning.
func TestResumeWithNoCheckpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := embedded(ctx, t)
	err := coordha.Run(ctx, coordha.Config{ID: "a", Listen: "127.0.0.1:0", Endpoints: e.Endpoints(), Prefix: "/noresume-test",
		Options: coord.Options{Servers: 1, Workers: 1, CheckpointDir: t.TempDir(), Resume: true}})
	if !errors.Is(err, checkpoint.ErrNoCheckpoint) || ctx.Err() != nil {
		t.Fatalf("Run --resume over an empty checkpoint directory: %v (context %v), want %v", err, ctx.Err(), checkpoint.ErrNoCheckpoint)
	}
}
