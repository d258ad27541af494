package meta

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// The coordinator's event timeline (docs/design/observe.md) is kept one
// key per event, so that a write carries only the new events, and the
// keys sort in order: P/events/<seq, 20 digits>, and the routine events
// (api.RoutineEvent: grants and splits) apart, under P/events-routine/,
// so that each class is bounded on its own. Each write deletes the events
// of each class below where the coordinator's timeline now starts.

func (s *Store) eventsKey(routine bool) string {
	if routine {
		return s.key("events-routine") + "/"
	}
	return s.key("events") + "/"
}

func (s *Store) eventKey(routine bool, seq uint64) string {
	return fmt.Sprintf("%s%020d", s.eventsKey(routine), seq)
}

// PutEvents adds evs to the timeline while lead is current, and forgets
// the events of each class older than kept says (not writing those of
// evs).
func (s *Store) PutEvents(ctx context.Context, lead *Leadership, evs []api.Event, kept api.EventsKept) error {
	if len(evs) == 0 {
		return nil
	}
	ops := make([]clientv3.Op, 0, len(evs)+2)
	for _, e := range evs {
		routine := api.RoutineEvent(e.Kind)
		if from := fromOf(kept, routine); e.Seq < from {
			continue // forgotten in this very write
		}
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("meta: put events: %w", err)
		}
		ops = append(ops, clientv3.OpPut(s.eventKey(routine, e.Seq), string(b)))
	}
	for _, routine := range []bool{false, true} {
		if from := fromOf(kept, routine); from > 0 {
			ops = append(ops, clientv3.OpDelete(s.eventsKey(routine), clientv3.WithRange(s.eventKey(routine, from))))
		}
	}
	if _, err := s.retryGuarded(ctx, lead, ops...); err != nil {
		return fmt.Errorf("meta: put events: %w", err)
	}
	return nil
}

// fromOf is where kept starts the class of routine events, or the other.
func fromOf(kept api.EventsKept, routine bool) uint64 {
	if routine {
		return kept.Routine
	}
	return kept.Other
}

// Events returns the timeline, both classes, oldest first; an entry that
// does not decode is skipped.
func (s *Store) Events(ctx context.Context) ([]api.Event, error) {
	var evs []api.Event
	for _, routine := range []bool{false, true} {
		resp, err := s.cli.Get(ctx, s.eventsKey(routine), clientv3.WithPrefix())
		if err != nil {
			return nil, fmt.Errorf("meta: events: %w", err)
		}
		for _, kv := range resp.Kvs {
			var e api.Event
			if json.Unmarshal(kv.Value, &e) == nil {
				evs = append(evs, e)
			}
		}
	}
	slices.SortFunc(evs, func(a, b api.Event) int { return cmp.Compare(a.Seq, b.Seq) })
	return evs, nil
}
