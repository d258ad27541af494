package node

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"log/slog"
	"time"

	"github.com/terrace-ml/terrace/internal/control/meta"
	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/tier"
)

// newIncarnation names this process among every run of a node ID: the
// coordinator acts on the end of a registration only if it belongs to the
// incarnation that joined last.
func newIncarnation() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// registration keeps a node registered in etcd, where the layout's
// Membership says, so that the coordinator also hears of its death from
// etcd when the node's lease expires. It is a second detector: the
// coordinator's own pings and heartbeats do not depend on it, so failing
// to register costs a warning, not the node.
type registration struct {
	done chan struct{}
	stop context.CancelFunc
}

// register starts registering node role/id, incarnation inc, at addr,
// where l's Membership says, under a lease of l's failure timeout; it does
// nothing if l has no Membership (a coordinator without etcd).
func register(ctx context.Context, l *layout.Layout, role, id, inc, addr string, labels map[string]string, nw transport.Network, log *slog.Logger) *registration {
	ctx, stop := context.WithCancel(ctx)
	r := &registration{done: make(chan struct{}), stop: stop}
	if l.Membership == nil {
		close(r.done)
		return r
	}
	m, ttl := *l.Membership, l.FailureTimeout()
	go func() {
		defer close(r.done)
		all := map[string]string{layout.IncarnationLabel: inc}
		for k, v := range labels {
			all[k] = v
		}
		keepRegistered(ctx, m, ttl, role, id, meta.NodeInfo{Addr: addr, Labels: all}, etcdTLS(nw), log)
	}()
	return r
}

// Registration labels of a node's machine (issue 11): a leader restoring
// from etcd can count machines by class, and a class-wide loss shows as
// many registrations of one class ending together.
const (
	ClassLabel   = "class"
	MachineLabel = "machine"
)

// machineLabels are the registration labels of a node on machine of class.
func machineLabels(machine string, class tier.Class) map[string]string {
	l := map[string]string{ClassLabel: class.String()}
	if machine != "" {
		l[MachineLabel] = machine
	}
	return l
}

// leave revokes the registration (at once, rather than at the lease's
// expiry) and waits for that, at most about a second.
func (r *registration) leave() {
	r.stop()
	<-r.done
}

// etcdTLS is the TLS configuration for etcd of a network that speaks TLS
// (tlsnet's), nil for plain TCP.
func etcdTLS(nw transport.Network) *tls.Config {
	if t, ok := nw.(interface{ ClientTLS() *tls.Config }); ok {
		return t.ClientTLS()
	}
	return nil
}

func keepRegistered(ctx context.Context, m layout.Membership, ttl time.Duration, role, id string, info meta.NodeInfo, tlsc *tls.Config, log *slog.Logger) {
	var st *meta.Store
	for st == nil {
		var err error
		if st, err = meta.Open(ctx, m.Endpoints, m.Prefix, meta.WithTLS(tlsc)); err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn("cannot reach etcd to register; retrying", "endpoints", m.Endpoints, "err", err)
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
				return
			}
		}
	}
	defer st.Close()
	warned := false
	for ctx.Err() == nil {
		mem, err := st.Register(ctx, role, id, info, ttl)
		if err != nil {
			// A previous incarnation's lease holds the key until it
			// expires, within one TTL; other errors are etcd's.
			if !errors.Is(err, meta.ErrMemberExists) && ctx.Err() == nil && !warned {
				log.Warn("could not register in etcd; retrying", "err", err)
				warned = true
			}
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return
			}
			continue
		}
		warned = false
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.Background(), time.Second)
			mem.Leave(lctx)
			cancel()
			return
		case <-mem.Lost():
			// The coordinator has probably declared this node dead; the
			// node hears of that on its own paths. Registering again keeps
			// etcd's view right if it was a mistake.
			log.Warn("etcd registration lost; registering again", "role", role, "id", id)
		}
	}
}
