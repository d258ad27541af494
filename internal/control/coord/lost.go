package coord

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/dataplane/wire"
)

// LostCluster describes a saved state whose model is gone: its job was
// under way on a ring, and no server of its layout answered as a process
// that holds a layout. Only a checkpoint can bring the job back.
type LostCluster struct {
	// Servers are the saved layout's servers, every one probed;
	// PassesDone the passes complete in the saved state.
	Servers    []string
	PassesDone int
}

// Lost reports whether the cluster whose state a coordinator saved (blob)
// lost its model with every server: its job was under way on a formed
// ring, and no server of its layout (on the ring, joining, on standby or
// a BackupPS) answers a ping as a process that has a layout. A server
// started since answers with epoch 0 (no coordinator has given it one
// yet: this one serves nothing before it decides), and one that does
// not answer is asked again until window has passed, so that a
// coordinator restarted alone finds its live servers at once and a
// whole cluster started again finds none of them. It reports false when
// the state had nothing to lose (no job, a done job, no ring yet) or
// cannot be read (Restore then says why).
func Lost(ctx context.Context, o Options, blob []byte, window time.Duration) (LostCluster, bool) {
	st, err := decodeState(blob)
	if err != nil {
		return LostCluster{}, false
	}
	l := &st.Layout
	if st.Job == nil || !l.Ready || l.JobDone || len(l.Servers) == 0 {
		return LostCluster{}, false
	}
	c := &Coordinator{opts: o}
	all := l.AllServers()
	lost := LostCluster{PassesDone: st.DoneBefore}
	pctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	var wg sync.WaitGroup
	var holds atomic.Bool
	for _, s := range all {
		lost.Servers = append(lost.Servers, s.ID)
		wg.Add(1)
		go func(id, addr string) {
			defer wg.Done()
			if c.holdsLayout(pctx, id, addr) {
				holds.Store(true)
				cancel() // one is enough
			}
		}(s.ID, s.Addr)
	}
	wg.Wait()
	slices.Sort(lost.Servers)
	lost.Servers = slices.Compact(lost.Servers)
	return lost, !holds.Load() && ctx.Err() == nil
}

// holdsLayout pings server id at addr until it answers or ctx ends, and
// reports whether it answered with a configuration epoch (a process that
// was given a layout). Another server answering there holds none of it.
func (c *Coordinator) holdsLayout(ctx context.Context, id, addr string) bool {
	for ctx.Err() == nil {
		dctx, cancel := context.WithTimeout(ctx, c.pingTimeout())
		conn, err := transport.Dial(dctx, addr, transport.DialOptions{Hello: wire.Hello{Worker: wire.NoWorker, Node: "coordinator"}, DialTimeout: c.pingTimeout(), Network: c.opts.Network})
		if err == nil {
			epoch, perr := pingEpoch(dctx, id, conn)
			conn.Close()
			if errors.Is(perr, errOtherServer) {
				cancel()
				return false
			}
			if perr == nil {
				cancel()
				return epoch > 0
			}
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(c.pingEvery()):
		}
	}
	return false
}
