package coord

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/internal/placement/ring"
)

// Failure detection: the coordinator holds a connection to every server
// and pings it, five times per failure timeout. A killed process closes
// its sockets, which the coordinator sees at once; a machine that vanishes
// silently misses its pings. Either way one re-dial decides, so that a
// slow network does not evict a live server on a single missed ping.
func (c *Coordinator) pingEvery() time.Duration   { return c.failureTimeout() / 5 }
func (c *Coordinator) pingTimeout() time.Duration { return c.failureTimeout() * 4 / 5 }

// Monitor watches the layout's servers and removes those that fail.
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
		for _, s := range append(append([]ring.Server(nil), l.Servers...), l.Joining...) {
			live[s.ID+"@"+s.Addr] = true
			key := s.ID + "@" + s.Addr
			if _, ok := watching[key]; ok {
				continue
			}
			wctx, cancel := context.WithCancel(ctx)
			watching[key] = cancel
			go func(id, addr string) {
				if c.watchServer(wctx, id, addr) {
					log.Warn("server failed; removing it from the layout", "server", id, "addr", addr)
					c.RemoveServer(id, addr)
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
		conn, err := c.probe(ctx, addr)
		if err != nil {
			return ctx.Err() == nil
		}
		c.pingLoop(ctx, conn)
		conn.Close()
		// The connection broke or went silent: one fresh dial decides.
	}
	return false
}

func (c *Coordinator) probe(ctx context.Context, addr string) (*transport.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, c.pingTimeout())
	defer cancel()
	conn, err := transport.Dial(dctx, addr, transport.DialOptions{Hello: wire.Hello{Worker: wire.NoWorker, Node: "coordinator"}, DialTimeout: c.pingTimeout(), Network: c.opts.Network})
	if err != nil {
		return nil, err
	}
	if err := ping(dctx, conn); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// pingLoop pings until a ping fails or ctx ends.
func (c *Coordinator) pingLoop(ctx context.Context, conn *transport.Client) {
	t := time.NewTicker(c.pingEvery())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, c.pingTimeout())
		err := ping(pctx, conn)
		cancel()
		if err != nil {
			return
		}
	}
}

func ping(ctx context.Context, conn *transport.Client) error {
	done := make(chan error, 1)
	id := conn.NextID()
	conn.Call(wire.NewFrame(wire.Header{Type: wire.TPing, ReqID: id}), id, &transport.Call{
		OnReply: func(h wire.Header, r *wire.Reader) error {
			_, err := r.Payload(h)
			done <- err
			return err
		},
		OnFail: func(err error) { done <- err },
	}, nil)
	select {
	case err := <-done:
		return err
	case <-conn.Done():
		return transport.ErrConnLost
	case <-ctx.Done():
		conn.Forget(id)
		return ctx.Err()
	}
}

// MemberGone is told that node role/id, incarnation inc, is no longer
// registered in etcd: its lease expired (the process died, or lost etcd)
// or was revoked (it left). That is a suspicion, which the coordinator's
// own evidence decides, because etcd can lose a live node's lease (its
// member died and an election ran longer than the TTL) and a node that
// lost only etcd still trains. A worker is declared dead if it has not
// heartbeated within half the failure timeout (2.5 heartbeats) after the
// news; a server, if a fresh dial and ping fail. A dead worker's rank is
// finished and its leases return to the pool; a dead server leaves the
// layout as RemoveServer takes it out. Nothing happens if inc is not the
// incarnation that joined last (the registration of a process that
// restarted since) or if the node is gone already. MemberGone returns
// once decided (within about a failure timeout), reporting whether the
// node was taken out.
func (c *Coordinator) MemberGone(ctx context.Context, role, id, inc string) bool {
	current := func() bool { return inc != "" && c.incarnations[role+"/"+id] == inc }
	c.mu.Lock()
	if !current() {
		c.mu.Unlock()
		return false
	}
	switch role {
	case RoleWorker:
		c.mu.Unlock()
		grace := c.failureTimeout() / 2
		select {
		case <-time.After(grace):
		case <-ctx.Done():
			return false
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		r, ok := c.workers[id]
		if !current() || !ok || c.finishedLocked(r) {
			return false
		}
		if _, reported := c.reports[r]; reported {
			return false // it finished its work and exited
		}
		if time.Since(c.beats[r]) < grace {
			c.log.Info("worker's etcd registration ended, but it heartbeats: kept", "worker", id, "rank", r)
			return false
		}
		c.log.Warn("worker's etcd registration ended and it is silent: its leases return to the pool", "worker", id, "rank", r)
		c.finishLocked(r)
		c.publish()
		return true
	case RoleServer:
		all := append(slices.Clone(c.lay.Servers), c.lay.Joining...)
		i := slices.IndexFunc(all, func(s ring.Server) bool { return s.ID == id })
		if i < 0 {
			c.mu.Unlock()
			return false
		}
		addr := all[i].Addr
		c.mu.Unlock()
		if conn, err := c.probe(ctx, addr); err == nil {
			conn.Close()
			c.log.Info("server's etcd registration ended, but it answers: kept", "server", id)
			return false
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if !current() || !c.removeServerLocked(id, addr) {
			return false
		}
		c.log.Warn("server's etcd registration ended and it does not answer: removed from the layout", "server", id, "addr", addr)
		return true
	}
	c.mu.Unlock()
	return false
}
