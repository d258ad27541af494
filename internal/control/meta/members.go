package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// NodeInfo is what a member publishes about itself.
type NodeInfo struct {
	Addr   string            `json:"addr"`
	Labels map[string]string `json:"labels,omitempty"`
}

// Member is this process's registration under a lease that it keeps alive.
type Member struct {
	role, id string
	lease    clientv3.LeaseID
	stop     context.CancelFunc
	lost     chan struct{}
	store    *Store
}

// MemberEvent is a change to a role's members. A Deleted event carries the
// Info the member had registered.
type MemberEvent struct {
	Role, ID string
	Info     NodeInfo
	Deleted  bool
	Rev      int64
}

// Register publishes info as members/<role>/<id>, bound to a new lease of
// ttl (rounded up to whole seconds, and raised by etcd to its minimum of
// 1.5 election timeouts) that is kept alive until Leave or until the
// Store is closed. If a live member holds the same role and id, it fails
// with ErrMemberExists: a process restarted within the TTL of its earlier
// incarnation retries until that lease has expired (or is evicted).
func (s *Store) Register(ctx context.Context, role, id string, info NodeInfo, ttl time.Duration) (*Member, error) {
	if err := checkName("role", role); err != nil {
		return nil, fmt.Errorf("meta: register: %w", err)
	}
	if err := checkName("id", id); err != nil {
		return nil, fmt.Errorf("meta: register: %w", err)
	}
	val, err := json.Marshal(info)
	if err != nil {
		return nil, fmt.Errorf("meta: register %s/%s: %w", role, id, err)
	}
	secs := int64(math.Ceil(ttl.Seconds()))
	if secs < 1 {
		secs = 1
	}
	g, err := s.cli.Grant(ctx, secs)
	if err != nil {
		return nil, fmt.Errorf("meta: register %s/%s: grant lease: %w", role, id, err)
	}
	key := s.membersKey(role) + id
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(g.ID))).
		Commit()
	if err == nil && !resp.Succeeded {
		err = fmt.Errorf("%w: %s/%s", ErrMemberExists, role, id)
	}
	if err != nil {
		// The lease would expire by itself; revoking frees it now.
		s.revokeQuietly(ctx, g.ID)
		return nil, fmt.Errorf("meta: register %s/%s: %w", role, id, err)
	}
	// The keep-alive outlives ctx, which only bounds the registration.
	kctx, stop := context.WithCancel(s.cli.Ctx())
	ka, err := s.cli.KeepAlive(kctx, g.ID)
	if err != nil {
		stop()
		s.revokeQuietly(ctx, g.ID)
		return nil, fmt.Errorf("meta: register %s/%s: keep alive: %w", role, id, err)
	}
	m := &Member{role: role, id: id, lease: g.ID, stop: stop, lost: make(chan struct{}), store: s}
	// The client closes ka once the lease is gone: expired (no renewal
	// answered within the TTL), revoked, or the client closed. A revoked
	// lease is noticed only at the next renewal, up to a third of the TTL
	// later, so the member also watches its own key: Evict deletes it.
	own := s.cli.Watch(kctx, key, clientv3.WithRev(resp.Header.Revision+1))
	go func() {
		defer close(m.lost)
		for {
			select {
			case _, ok := <-ka:
				if !ok {
					return
				}
			case wr, ok := <-own:
				if !ok {
					// Renewals alone tell when the lease ends.
					own = nil
					continue
				}
				for _, ev := range wr.Events {
					if ev.Type == clientv3.EventTypeDelete {
						stop()
						return
					}
				}
			}
		}
	}()
	return m, nil
}

// Role returns the member's role.
func (m *Member) Role() string { return m.role }

// ID returns the member's id.
func (m *Member) ID() string { return m.id }

// Lost is closed once the member's lease is no longer kept alive: it
// expired, was evicted, or the member left. Everything bound to the lease
// (its members key, its partitions) is then gone or about to go.
func (m *Member) Lost() <-chan struct{} { return m.lost }

// Leave revokes the member's lease: its key and its partition leases
// disappear at once. Leaving a member whose lease is already lost is not
// an error.
func (m *Member) Leave(ctx context.Context) error {
	m.stop()
	if _, err := m.store.cli.Revoke(ctx, m.lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("meta: leave %s/%s: %w", m.role, m.id, err)
	}
	return nil
}

// Members returns the live members of role and the revision of the read,
// from which WatchMembers continues.
func (s *Store) Members(ctx context.Context, role string) (map[string]NodeInfo, int64, error) {
	if err := checkName("role", role); err != nil {
		return nil, 0, fmt.Errorf("meta: members: %w", err)
	}
	pfx := s.membersKey(role)
	resp, err := s.cli.Get(ctx, pfx, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("meta: members %s: %w", role, err)
	}
	out := make(map[string]NodeInfo, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var info NodeInfo
		if err := json.Unmarshal(kv.Value, &info); err != nil {
			return nil, 0, fmt.Errorf("meta: members %s: %s: %w", role, kv.Key, err)
		}
		out[strings.TrimPrefix(string(kv.Key), pfx)] = info
	}
	return out, resp.Header.Revision, nil
}

// Member returns the registration of role/id and the revision that
// created it (a new one for every registration), or ErrNotFound.
func (s *Store) Member(ctx context.Context, role, id string) (NodeInfo, int64, error) {
	resp, err := s.cli.Get(ctx, s.membersKey(role)+id)
	if err != nil {
		return NodeInfo{}, 0, fmt.Errorf("meta: member %s/%s: %w", role, id, err)
	}
	if len(resp.Kvs) == 0 {
		return NodeInfo{}, 0, fmt.Errorf("meta: member %s/%s: %w", role, id, ErrNotFound)
	}
	var info NodeInfo
	if err := json.Unmarshal(resp.Kvs[0].Value, &info); err != nil {
		return NodeInfo{}, 0, fmt.Errorf("meta: member %s/%s: %w", role, id, err)
	}
	return info, resp.Kvs[0].CreateRevision, nil
}

// WatchMembers streams the changes to role's members after revision
// fromRev (as returned by Members; 0 means from now). The channel closes
// when ctx ends, when the Store closes, or when the history after fromRev
// has been compacted; the caller then reads again and watches from there.
func (s *Store) WatchMembers(ctx context.Context, role string, fromRev int64) <-chan MemberEvent {
	pfx := s.membersKey(role)
	return watch(ctx, s, pfx, fromRev, func(ev *clientv3.Event) (MemberEvent, bool) {
		e := MemberEvent{Role: role, ID: strings.TrimPrefix(string(ev.Kv.Key), pfx), Rev: ev.Kv.ModRevision}
		val := ev.Kv.Value
		if ev.Type == clientv3.EventTypeDelete {
			e.Deleted = true
			val = nil
			if ev.PrevKv != nil {
				val = ev.PrevKv.Value
			}
		}
		// Only Register writes these keys; an undecodable value is
		// reported with empty Info rather than dropped.
		_ = json.Unmarshal(val, &e.Info)
		return e, true
	}, clientv3.WithPrevKV())
}

// Evict revokes the lease of member role/id, removing it and freeing its
// partitions at once. The coordinator uses it when it has confirmed a
// failure sooner than the TTL would (a refused connection, say).
func (s *Store) Evict(ctx context.Context, role, id string) error {
	key := s.membersKey(role) + id
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("meta: evict %s/%s: %w", role, id, err)
	}
	if len(resp.Kvs) == 0 {
		return fmt.Errorf("meta: evict %s/%s: %w", role, id, ErrNotFound)
	}
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	if lease == clientv3.NoLease {
		_, err = s.cli.Delete(ctx, key)
	} else if _, err = s.cli.Revoke(ctx, lease); errors.Is(err, rpctypes.ErrLeaseNotFound) {
		// It expired between the read and the revoke.
		err = nil
	}
	if err != nil {
		return fmt.Errorf("meta: evict %s/%s: %w", role, id, err)
	}
	return nil
}
