package meta

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// TestEventsBounded: the timeline keeps each class of events from where
// the coordinator's starts it (api.EventsKept), in order, the routine
// events (grants) apart from the rest, and a deposed leader cannot add to
// it.
func TestEventsBounded(t *testing.T) {
	s := open(t)
	ctx := ctxT(t, 15*time.Second)
	l, err := s.Campaign(ctx, "coord-a")
	if err != nil {
		t.Fatal(err)
	}
	// Seqs 1-12: a failure at 2, a join at 7, grants otherwise.
	for batch := range 4 {
		var evs []api.Event
		for i := range 3 {
			seq := uint64(batch*3 + i + 1)
			kind := api.EventGrant
			switch seq {
			case 2:
				kind = api.EventFailed
			case 7:
				kind = api.EventJoin
			}
			evs = append(evs, api.Event{Seq: seq, Kind: kind, Epoch: seq})
		}
		// The grants from 8 on, the others all.
		if err := s.PutEvents(ctx, l, evs, api.EventsKept{Routine: 8, Other: 2}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint64{2, 7, 8, 9, 10, 11, 12}; !slices.Equal(seqs(got), want) {
		t.Fatalf("kept %v, want %v", seqs(got), want)
	}
	// A batch whose older events are forgotten already writes only the
	// rest; the failure goes when the others' start passes it.
	big := []api.Event{{Seq: 13, Kind: api.EventGrant}, {Seq: 14, Kind: api.EventJoin}, {Seq: 15, Kind: api.EventGrant}}
	if err := s.PutEvents(ctx, l, big, api.EventsKept{Routine: 15, Other: 7}); err != nil {
		t.Fatal(err)
	}
	if got, _ = s.Events(ctx); !slices.Equal(seqs(got), []uint64{7, 14, 15}) {
		t.Fatalf("after a second batch kept %v, want [7 14 15]", seqs(got))
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.PutEvents(ctx, l, []api.Event{{Seq: 99}}, api.EventsKept{}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a resigned leader wrote events: %v", err)
	}
}

func seqs(evs []api.Event) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}
