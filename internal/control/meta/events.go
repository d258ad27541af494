package meta

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// The coordinator's event timeline (docs/design/observe.md) is kept one
// key per event, P/events/<seq, 20 digits>, so that a write carries only
// the new events, and the keys sort in order. Each write deletes the
// events keep or more below its newest, so the timeline stays bounded.

func (s *Store) eventsKey() string { return s.key("events") + "/" }

func (s *Store) eventKey(seq uint64) string { return fmt.Sprintf("%s%020d", s.eventsKey(), seq) }

// PutEvents adds evs to the timeline while lead is current, and forgets
// those keep or more older than the newest of evs.
func (s *Store) PutEvents(ctx context.Context, lead *Leadership, evs []api.Event, keep int) error {
	if len(evs) == 0 {
		return nil
	}
	ops := make([]clientv3.Op, 0, len(evs)+1)
	newest := newestOf(evs)
	for _, e := range evs {
		if e.Seq+uint64(keep) <= newest {
			continue // forgotten in this very write
		}
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("meta: put events: %w", err)
		}
		ops = append(ops, clientv3.OpPut(s.eventKey(e.Seq), string(b)))
	}
	if newest > uint64(keep) {
		ops = append(ops, clientv3.OpDelete(s.eventsKey(), clientv3.WithRange(s.eventKey(newest-uint64(keep)+1))))
	}
	if _, err := s.retryGuarded(ctx, lead, ops...); err != nil {
		return fmt.Errorf("meta: put events: %w", err)
	}
	return nil
}

func newestOf(evs []api.Event) uint64 {
	var n uint64
	for _, e := range evs {
		n = max(n, e.Seq)
	}
	return n
}

// Events returns the timeline, oldest first; an entry that does not
// decode is skipped.
func (s *Store) Events(ctx context.Context) ([]api.Event, error) {
	resp, err := s.cli.Get(ctx, s.eventsKey(), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("meta: events: %w", err)
	}
	evs := make([]api.Event, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var e api.Event
		if json.Unmarshal(kv.Value, &e) == nil {
			evs = append(evs, e)
		}
	}
	return evs, nil
}
