package meta

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/terrace-ml/terrace/internal/placement/ring"
)

// Placement is the range map's input: which servers hold slots, with how
// many virtual nodes each, and how many replicas each slot has.
type Placement struct {
	Servers     []ring.Server `json:"servers"`
	VNodes      int           `json:"vnodes"`
	Replication int           `json:"replication"`
}

// PlacementEvent is a new placement and its epoch.
type PlacementEvent struct {
	Placement Placement
	Epoch     uint64
}

func (p *Placement) validate() error {
	if p.VNodes < 0 || p.Replication < 0 {
		return fmt.Errorf("%w: negative vnodes or replication", ErrInvalid)
	}
	if len(p.Servers) == 0 {
		return nil
	}
	if p.Replication > len(p.Servers) {
		return fmt.Errorf("%w: replication %d with %d servers", ErrInvalid, p.Replication, len(p.Servers))
	}
	if _, err := ring.New(1, p.Servers, p.VNodes); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// PutPlacement writes p if lead is still the current leader, and returns
// the new configuration epoch: the revision etcd gave the write. Every
// call is a new epoch, even with an unchanged p.
func (s *Store) PutPlacement(ctx context.Context, lead *Leadership, p Placement) (uint64, error) {
	op, err := s.placementOp(p)
	if err != nil {
		return 0, fmt.Errorf("meta: put placement: %w", err)
	}
	resp, err := s.guarded(ctx, lead, op)
	if err != nil {
		return 0, fmt.Errorf("meta: put placement: %w", err)
	}
	// The transaction's revision is the key's new ModRevision.
	return uint64(resp.Header.Revision), nil
}

// placementOp validates p and returns the put that writes it.
func (s *Store) placementOp(p Placement) (clientv3.Op, error) {
	if err := p.validate(); err != nil {
		return clientv3.Op{}, err
	}
	val, err := json.Marshal(p)
	if err != nil {
		return clientv3.Op{}, err
	}
	return clientv3.OpPut(s.placementKey(), string(val)), nil
}

// Placement returns the current placement and its epoch, or ErrNotFound
// before the first PutPlacement.
func (s *Store) Placement(ctx context.Context) (Placement, uint64, error) {
	resp, err := s.cli.Get(ctx, s.placementKey())
	if err != nil {
		return Placement{}, 0, fmt.Errorf("meta: placement: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return Placement{}, 0, fmt.Errorf("meta: placement: %w", ErrNotFound)
	}
	var p Placement
	if err := json.Unmarshal(resp.Kvs[0].Value, &p); err != nil {
		return Placement{}, 0, fmt.Errorf("meta: placement: %w", err)
	}
	return p, uint64(resp.Kvs[0].ModRevision), nil
}

// WatchPlacement streams the placements written after revision fromRev
// (an epoch; 0 means from now). The channel closes as WatchMembers's does.
func (s *Store) WatchPlacement(ctx context.Context, fromRev int64) <-chan PlacementEvent {
	// The exact key is a prefix of nothing else under our layout.
	return watch(ctx, s, s.placementKey(), fromRev, func(ev *clientv3.Event) (PlacementEvent, bool) {
		if ev.Type != clientv3.EventTypePut || string(ev.Kv.Key) != s.placementKey() {
			return PlacementEvent{}, false
		}
		var p Placement
		if json.Unmarshal(ev.Kv.Value, &p) != nil {
			return PlacementEvent{}, false
		}
		return PlacementEvent{Placement: p, Epoch: uint64(ev.Kv.ModRevision)}, true
	})
}
