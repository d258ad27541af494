package meta

import (
	"errors"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// TestEventsBounded: the timeline keeps the newest keep events, in order,
// and a deposed leader cannot add to it.
func TestEventsBounded(t *testing.T) {
	s := open(t)
	ctx := ctxT(t, 15*time.Second)
	l, err := s.Campaign(ctx, "coord-a")
	if err != nil {
		t.Fatal(err)
	}
	const keep = 5
	for batch := range 4 {
		var evs []api.Event
		for i := range 3 {
			seq := uint64(batch*3 + i + 1)
			evs = append(evs, api.Event{Seq: seq, Kind: api.EventGrant, Epoch: seq})
		}
		if err := s.PutEvents(ctx, l, evs, keep); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != keep || got[0].Seq != 8 || got[keep-1].Seq != 12 {
		t.Fatalf("kept %+v, want seqs 8..12", got)
	}
	// A batch larger than keep writes only its newest keep.
	var big []api.Event
	for i := range 12 {
		big = append(big, api.Event{Seq: uint64(13 + i), Kind: api.EventJoin})
	}
	if err := s.PutEvents(ctx, l, big, keep); err != nil {
		t.Fatal(err)
	}
	if got, _ = s.Events(ctx); len(got) != keep || got[0].Seq != 20 {
		t.Fatalf("after a large batch kept %d from %d, want %d from 20", len(got), got[0].Seq, keep)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.PutEvents(ctx, l, []api.Event{{Seq: 99}}, keep); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a resigned leader wrote events: %v", err)
	}
}
