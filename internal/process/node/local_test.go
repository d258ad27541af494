package node_test

import (
	"context"
	"errors"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/apps/lr"
	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
)

// TestRunWorkersNamesTheCause: when one worker's job fails, the others
// are canceled, and their "context canceled" is not what RunWorkers
// returns beside the failure (a bad data line was followed by a line of
// it on the terminal).
func TestRunWorkersNamesTheCause(t *testing.T) {
	ctx := t.Context()
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 1, Workers: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cause := errors.New("bad.txt:2: rating \"x\" is not a number")
	_, err = l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) {
		if c.Rank() == 0 {
			return nil, cause
		}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	if !errors.Is(err, cause) || strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("RunWorkers: %v, want the cause alone", err)
	}
}

// TestLocalWorkerRejoins: a worker of an in-process cluster (`terrace
// train`'s) cut off from the coordinator for several failure timeouts
// while its process lives (a starved goroutine, a stalled loopback) is
// declared dead; it joins again as a new worker, as `terrace worker`
// does, and the job ends without an error. It used to fail the whole
// train with "rank 0 was declared dead".
func TestLocalWorkerRejoins(t *testing.T) {
	if testing.Short() {
		t.Skip("trains lr for a few seconds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cut := &stallNet{}
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 1, Workers: 2, Replication: 1, FailureTimeout: 300 * time.Millisecond,
		Network: func(id string) transport.Network {
			if id != "worker-0" {
				return nil
			}
			return cut
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cut.addr = l.CoordAddr
	cfg := lr.DefaultConfig()
	cfg.Train, cfg.Passes = filepath.Join("..", "..", "..", "datasets", "a9a", "a9a.gz"), 400
	errc := make(chan error, 1)
	go func() {
		_, err := l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) { return lr.Run(ctx, c, cfg) })
		errc <- err
	}()
	time.Sleep(time.Second)
	cut.stalled.Store(true)
	time.Sleep(2 * time.Second)
	cut.stalled.Store(false)
	if err := <-errc; err != nil {
		t.Fatalf("RunWorkers: %v", err)
	}
	if _, ok := l.Coord.Reports()[2]; !ok {
		t.Errorf("no report from rank 2: the cut-off worker did not join again (reports from %v)", slices.Sorted(maps.Keys(l.Coord.Reports())))
	}
}

// stallNet is TCP whose connections to addr stop moving while stalled.
type stallNet struct {
	addr    string
	stalled atomic.Bool
}

func (n *stallNet) Dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := transport.TCP.Dial(ctx, addr)
	if err != nil || addr != n.addr {
		return c, err
	}
	return &stallConn{Conn: c, n: n}, nil
}

func (n *stallNet) Listen(addr string) (net.Listener, error) { return transport.TCP.Listen(addr) }

type stallConn struct {
	net.Conn
	n      *stallNet
	closed atomic.Bool
}

func (c *stallConn) wait() error {
	for c.n.stalled.Load() {
		if c.closed.Load() {
			return net.ErrClosed
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

func (c *stallConn) Read(p []byte) (int, error) {
	if err := c.wait(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *stallConn) Write(p []byte) (int, error) {
	if err := c.wait(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

func (c *stallConn) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}
