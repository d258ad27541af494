package ps

import (
	"slices"
	"sync"

	"github.com/terrace-ml/terrace/internal/crc32c"
	"github.com/terrace-ml/terrace/internal/dataplane/wire"
)

// A push of a range spread over servers sends each server the runs it
// owns, 16 KiB and up, that alternate with the other servers' in the
// caller's vector. Summed frame by frame, each writer's CRC32C skipped
// through the vector run by run, which took 1.4-1.7x the processor time
// of the same bytes read in a row (docs/design/dataplane.md, "Two
// servers: one pass over the caller's memory"). A spreadPlan sums them in
// the order of the vector instead: it is cut into regions of about
// spreadRegionBytes bytes, and the first writer that needs a region sums all
// of its runs in a row, each into a running CRC32C of the part (frame)
// that carries it; a frame's CRC32C is then its header's combined with
// its share of each region it touches, one carry-less multiplication a
// share (crc32c.Shift).
type spreadPlan struct {
	w       int
	runs    []spreadRun // every summed part's runs, in the vector's order
	regions []spreadRegion
	nsums   int // running sums per op: one per part per region it touches
}

// spreadRegion is runs[first:end], whose sums are base and on.
type spreadRegion struct{ first, end, base int }

// spreadRun is a run of a part; sum is its part's sum in its region.
type spreadRun struct{ from, to, sum int }

// spreadShare is a part's share of one region: its running sum there and
// the shift over its bytes.
type spreadShare struct {
	region, sum int
	shift       crc32c.Shift
}

// spreadRegionBytes is how many bytes of the caller's vector a region covers,
// at least: the first writer to need one sums it all, so that its runs
// for the other servers are read in the same pass and are still in the
// cache when their writers copy them.
const spreadRegionBytes = 1 << 20

// newSpreadPlan plans the sums of the parts of a range over several
// servers whose frames their writers sum (many runs, minWriterSum floats
// or more), setting their spread; nil when fewer than two parts are.
func newSpreadPlan(parts []*part, w int) *spreadPlan {
	sp := &spreadPlan{w: w}
	var owner []*part // the part of each run, before sorting
	for _, p := range parts {
		if !p.viewable(w) || p.count*w < minWriterSum {
			continue
		}
		for _, r := range p.runs {
			sp.runs = append(sp.runs, spreadRun{from: r[0], to: r[1], sum: len(owner)})
		}
		owner = append(owner, p)
	}
	if len(owner) < 2 {
		return nil
	}
	slices.SortFunc(sp.runs, func(a, b spreadRun) int { return a.from - b.from })
	bytes := make([]int, 0) // by sum: the bytes of its part in its region
	last := make([]int, len(owner))
	for i := range last {
		last[i] = -1 // the part's sum in the current region
	}
	for first := 0; first < len(sp.runs); {
		rg := spreadRegion{first: first, base: sp.nsums}
		n := 0
		end := first
		for ; end < len(sp.runs) && n < spreadRegionBytes; end++ {
			r := &sp.runs[end]
			pi := r.sum
			if last[pi] < rg.base {
				last[pi] = sp.nsums
				owner[pi].spread = append(owner[pi].spread, spreadShare{region: len(sp.regions), sum: sp.nsums})
				bytes = append(bytes, 0)
				sp.nsums++
			}
			r.sum = last[pi]
			bytes[r.sum] += 4 * w * (r.to - r.from)
			n += 4 * w * (r.to - r.from)
		}
		rg.end = end
		sp.regions = append(sp.regions, rg)
		first = end
	}
	for _, p := range owner {
		for i := range p.spread {
			p.spread[i].shift = crc32c.ShiftBy(bytes[p.spread[i].sum])
		}
	}
	return sp
}

// spreadSums are one push's running sums under a spreadPlan.
type spreadSums struct {
	pl   *spreadPlan
	vals []float32
	once []sync.Once // by region
	sums []uint32
}

func (sp *spreadPlan) start(vals []float32) *spreadSums {
	return &spreadSums{pl: sp, vals: vals, once: make([]sync.Once, len(sp.regions)), sums: make([]uint32, sp.nsums)}
}

// sumRegion sums every run of region r into its part's sum there.
func (s *spreadSums) sumRegion(r int) {
	rg := s.pl.regions[r]
	w := s.pl.w
	for _, run := range s.pl.runs[rg.first:rg.end] {
		s.sums[run.sum] = crc32c.Update(s.sums[run.sum], wire.F32Bytes(s.vals[run.from*w:run.to*w]))
	}
}

// extend returns crc continued over the values of the part whose shares
// are given (its runs, in order), summing the regions not summed yet.
func (s *spreadSums) extend(shares []spreadShare, crc uint32) uint32 {
	for _, sh := range shares {
		s.once[sh.region].Do(func() { s.sumRegion(sh.region) })
		crc = sh.shift.Combine(crc, s.sums[sh.sum])
	}
	return crc
}
