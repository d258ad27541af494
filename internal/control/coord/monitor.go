package coord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/dataplane/wire"
)

// Failure detection: the coordinator holds a connection to every server
// and pings it, five times per failure timeout and at least every
// maxPingEvery. A killed process closes its sockets, which the next ping
// sees at once; a machine that vanishes silently misses its pings. Either
// way one re-dial decides, so that a slow network does not evict a live
// server on a single missed ping. A ping may take 4/5 of the timeout.
func (c *Coordinator) pingEvery() time.Duration {
	return min(c.failureTimeout()/5, maxPingEvery)
}

// maxPingEvery bounds the interval of pings: a killed server is found
// within it (and a refused dial), whatever the timeout, as under the 1 s
// timeout this was written for.
const maxPingEvery = 200 * time.Millisecond

func (c *Coordinator) pingTimeout() time.Duration { return c.failureTimeout() * 4 / 5 }

func (c *Coordinator) failureTimeout() time.Duration {
	if c.opts.FailureTimeout > 0 {
		return c.opts.FailureTimeout
	}
	return DefaultFailureTimeout
}

// Monitor watches the layout's servers and removes those that fail: on
// the ring, joining, on standby (a dead one there would be taken as a
// joiner by the next switch from stage 1), and the BackupPS (the
// ActivePS acknowledge no push until a BackupPS's ledger has it: a dead
// one left in the layout stalls the job).
func (c *Coordinator) Monitor(ctx context.Context, log *slog.Logger) {
	var mu sync.Mutex
	watching := map[string]context.CancelFunc{}
	var version uint64
	for ctx.Err() == nil {
		l, err := c.Layout(ctx, version)
		if err != nil {
			break
		}
		version = l.Version
		mu.Lock()
		live := map[string]bool{}
		for _, s := range l.AllServers() {
			live[s.ID+"@"+s.Addr] = true
			key := s.ID + "@" + s.Addr
			if _, ok := watching[key]; ok {
				continue
			}
			wctx, cancel := context.WithCancel(ctx)
			watching[key] = cancel
			go func(id, addr string) {
				// A server that exits on purpose (with a cluster that
				// ends with its job, or the last one after the job) is
				// not removed, nor news; the last one failing during
				// the job is said by the machine (lastServerDown), and
				// said to be up again once it answers.
				for c.watchServer(wctx, id, addr) {
					if c.RemoveServer(ctx, id, addr) {
						log.Warn("server failed: removed from the layout", "server", id, "addr", addr)
						return
					}
					if !c.awaitAnswer(wctx, id, addr) {
						return
					}
					c.call(ctx, func(m *Machine, rid uint64) { m.ServerAnswers(rid, id, addr) })
				}
			}(s.ID, s.Addr)
		}
		for key, cancel := range watching {
			if !live[key] {
				cancel()
				delete(watching, key)
			}
		}
		mu.Unlock()
	}
	mu.Lock()
	for _, cancel := range watching {
		cancel()
	}
	mu.Unlock()
}

// watchServer returns true once the server at addr has failed, false when
// ctx ends first.
func (c *Coordinator) watchServer(ctx context.Context, id, addr string) bool {
	for ctx.Err() == nil {
		conn, err := c.probe(ctx, id, addr)
		if err != nil {
			return ctx.Err() == nil
		}
		c.pingLoop(ctx, id, conn)
		conn.Close()
		// The connection broke or went silent: one fresh dial decides.
	}
	return false
}

// awaitAnswer dials addr once a failure timeout until server id answers a
// ping there (true) or ctx ends (false): a server kept in the layout once
// found dead, which may come back.
func (c *Coordinator) awaitAnswer(ctx context.Context, id, addr string) bool {
	t := time.NewTicker(c.failureTimeout())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		if conn, err := c.probe(ctx, id, addr); err == nil {
			conn.Close()
			return true
		}
	}
}

func (c *Coordinator) probe(ctx context.Context, id, addr string) (*transport.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, c.pingTimeout())
	defer cancel()
	conn, err := transport.Dial(dctx, addr, transport.DialOptions{Hello: wire.Hello{Worker: wire.NoWorker, Node: "coordinator"}, DialTimeout: c.pingTimeout(), Network: c.opts.Network})
	if err != nil {
		return nil, err
	}
	if err := ping(dctx, id, conn); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// pingLoop pings server id until a ping fails or ctx ends.
func (c *Coordinator) pingLoop(ctx context.Context, id string, conn *transport.Client) {
	t := time.NewTicker(c.pingEvery())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, c.pingTimeout())
		err := ping(pctx, id, conn)
		cancel()
		if err != nil {
			return
		}
	}
}

// errOtherServer: the process answering at a server's address is
// another server. A whole cluster stopped and started again on the same
// ports gave the dead servers' addresses to new ones, whose answers kept
// the dead ones in the layout, holding every slot, and the new ones
// joining for good.
var errOtherServer = errors.New("another server answers at its address")

// ping pings server id, failing if another server answers.
func ping(ctx context.Context, id string, conn *transport.Client) error {
	_, err := pingEpoch(ctx, id, conn)
	return err
}

// pingEpoch pings server id and returns the configuration epoch it
// answers with: 0 until a coordinator has given it a layout. The answer
// of another server is errOtherServer; one naming no server (a server
// of an earlier version) is taken as id's.
func pingEpoch(ctx context.Context, id string, conn *transport.Client) (uint64, error) {
	who, epoch, err := conn.Ping(ctx)
	if err == nil && who != "" && who != id {
		err = fmt.Errorf("coord: pinging %s: %w: %s", id, errOtherServer, who)
	}
	return epoch, err
}

// RemoveServer takes a failed server (at addr; "" for any) out of the
// layout, and reports whether it was there.
func (c *Coordinator) RemoveServer(ctx context.Context, id, addr string) bool {
	r, err := c.call(ctx, func(m *Machine, rid uint64) { m.ServerFailed(rid, id, addr) })
	return err == nil && r.Removed
}

// MemberGone is told that node role/id, incarnation inc, is no longer
// registered in etcd, and returns once the coordinator has decided
// (Machine.MemberGone: within about a failure timeout), reporting whether
// the node was taken out.
func (c *Coordinator) MemberGone(ctx context.Context, role, id, inc string) bool {
	r, err := c.call(ctx, func(m *Machine, rid uint64) { m.MemberGone(rid, role, id, inc) })
	return err == nil && r.Removed
}
