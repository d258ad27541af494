package ps

import (
	"testing"

	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/table"
)

// TestRangePartsCutAtUnits: a dense range spread over servers is cut into
// frames only where a placement unit begins (or where a server's run
// ends), so that no dense group of a server's store lies in two of its
// frames. A group split that way was pinned by one frame's reply while
// the next frame's push wrote it, and was moved to a new buffer each round
// (store.PinRun). Nor does a part hold keys both of the slots placed one
// by one (keyspace.SpreadSlots) and of units: the server copied such a
// part's reply whole instead of answering from its dense groups. Every
// key is in exactly one part, and no part is over the frame's limit.
func TestRangePartsCutAtUnits(t *testing.T) {
	const unitKeys = keyspace.SlotSize << keyspace.UnitBits
	const spreadEnd = keyspace.SpreadSlots * keyspace.SlotSize
	rm, err := ring.New(1, []ring.Server{{ID: "server-0"}, {ID: "server-1"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	tb := &Table{c: &Client{}, spec: table.Spec{Width: 1}}
	limit := tb.maxPartKeys(true)
	for _, r := range []keyspace.Range{
		{Lo: 0, Hi: 16 << 20},                        // the bench's 64 MiB vector
		{Lo: 3 * unitKeys / 2, Hi: 6<<20 + 77},       // starts and ends mid-unit
		{Lo: 1 << 30, Hi: 1<<30 + 3*uint64(limit)/2}, // beyond the spread region only
	} {
		pl := tb.buildPlan(rm, &op{isRange: true, rng: r})
		seen := make([]bool, r.Len())
		ends := map[int]map[uint64]bool{} // each server's run ends
		for s := range rm.Servers {
			ends[s] = map[uint64]bool{r.Hi: true}
			rm.OwnedRuns(r, s, func(_, hi uint64) { ends[s][hi] = true })
		}
		for _, p := range pl.parts {
			if p.count > limit {
				t.Fatalf("%v: part of %d keys, limit %d", r, p.count, limit)
			}
			for _, run := range p.runs {
				for i := run[0]; i < run[1]; i++ {
					if seen[i] {
						t.Fatalf("%v: key %d in two parts", r, r.Lo+uint64(i))
					}
					seen[i] = true
				}
			}
			first, end := r.Lo+uint64(p.runs[0][0]), r.Lo+uint64(p.runs[len(p.runs)-1][1])
			if first < spreadEnd && end > spreadEnd {
				t.Errorf("%v: a part to server %d holds keys %d to %d, both sides of the slots placed one by one", r, p.server, first, end)
			}
			if end%unitKeys != 0 && !ends[p.server][end] {
				t.Errorf("%v: a part to server %d ends at key %d, inside a unit and a run", r, p.server, end)
			}
		}
		for i, ok := range seen {
			if !ok {
				t.Fatalf("%v: key %d in no part", r, r.Lo+uint64(i))
			}
		}
	}
}
