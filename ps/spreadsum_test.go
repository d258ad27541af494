package ps

import (
	"math/rand"
	"sync"
	"testing"

	"github.com/terrace-ml/terrace/internal/crc32c"
	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/table"
)

// TestSpreadSumsMatchFrames: a push of a range spread over servers, its
// runs summed region by region in the order of the caller's vector
// (spreadPlan), gives each frame the CRC32C of its own runs summed in a
// row, whichever writer sums which region first (two goroutines, one a
// server, as the connections' writers), for ranges that start and end
// inside units and at widths 1 and 3. Every run of a summed part is in
// exactly one region, in order.
func TestSpreadSumsMatchFrames(t *testing.T) {
	rm, err := ring.New(1, []ring.Server{{ID: "server-0"}, {ID: "server-1"}, {ID: "server-2"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	const unitKeys = keyspace.SlotSize << keyspace.UnitBits
	for _, w := range []int{1, 3} {
		tb := &Table{c: &Client{}, spec: table.Spec{Width: w}}
		for _, r := range []keyspace.Range{
			{Lo: 0, Hi: 4 << 20},
			{Lo: 3*unitKeys/2 + 5, Hi: 3<<20 + 77},
			{Lo: 1 << 30, Hi: 1<<30 + 1<<20},
		} {
			pl := tb.buildPlan(rm, &op{isRange: true, rng: r})
			if pl.spread == nil {
				t.Fatalf("width %d, %v: no spread plan", w, r)
			}
			vals := make([]float32, int(r.Len())*w)
			rng := rand.New(rand.NewSource(int64(w)))
			for i := range vals {
				vals[i] = rng.Float32()
			}
			// The runs of the plan, region by region, are those of the
			// summed parts, each once and in order.
			var covered int
			prev := -1
			for _, rg := range pl.spread.regions {
				for _, run := range pl.spread.runs[rg.first:rg.end] {
					if run.from < prev {
						t.Fatalf("width %d, %v: run at %d after %d", w, r, run.from, prev)
					}
					prev = run.to
					covered += run.to - run.from
				}
			}
			want := map[*part]uint32{}
			summed := 0
			for _, p := range pl.parts {
				if p.spread == nil {
					continue
				}
				summed += p.count
				crc := uint32(0x1234567) // as if the header and prefix came before
				for _, run := range p.runs {
					crc = crc32c.Update(crc, wire.F32Bytes(vals[run[0]*w:run[1]*w]))
				}
				want[p] = crc
			}
			if covered != summed || len(want) < 2 {
				t.Fatalf("width %d, %v: regions cover %d keys, the %d summed parts %d", w, r, covered, len(want), summed)
			}
			for range 3 {
				s := pl.spread.start(vals)
				var wg sync.WaitGroup
				got := make([]map[*part]uint32, 2)
				for g := range got {
					got[g] = map[*part]uint32{}
					wg.Go(func() {
						for _, p := range pl.parts {
							if p.spread != nil && (p.server == 0) == (g == 0) {
								got[g][p] = s.extend(p.spread, 0x1234567)
							}
						}
					})
				}
				wg.Wait()
				for _, m := range got {
					for p, crc := range m {
						if crc != want[p] {
							t.Fatalf("width %d, %v: part to server %d at %d: spread sum %#x, in a row %#x", w, r, p.server, p.runs[0][0], crc, want[p])
						}
					}
				}
			}
		}
	}
}
