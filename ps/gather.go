package ps

import (
	"math/bits"
	"sync"

	"github.com/terrace-ml/terrace/internal/dataplane/wire"
)

// gatherPools recycle the buffers that a part's values are gathered into
// when its keys are not one run of the caller's vector (a range spread
// over several servers, whose slots alternate between them): allocating
// 2 MiB a frame cost a page-clearing pass and garbage collection on top of
// the copy. Pool c holds buffers of 1<<c floats.
var gatherPools [40]sync.Pool

// gatherInto is gather for a part of several runs, into a pooled buffer;
// release returns the buffer once the frame is written.
func gatherInto(vals []float32, runs [][2]int, count, w int) (out []float32, release func(error)) {
	n := count * w
	c := bits.Len(uint(max(n, 1) - 1))
	b, ok := gatherPools[c].Get().(*[]float32)
	if !ok {
		s := make([]float32, 1<<c)
		b = &s
	}
	out = (*b)[:0]
	for _, r := range runs {
		out = append(out, vals[r[0]*w:r[1]*w]...)
	}
	return out, func(error) { gatherPools[c].Put(b) }
}

// minRunView is the least mean run, in floats, for which a part's values
// go out as views of the caller's runs (one iovec each in the writer's
// writev) instead of gathered into one buffer: a range spread over
// servers by placement units arrives in runs of 4,096 keys or more, which
// the kernel copies as cheaply from a hundred places as from one, while a key
// list's runs of a few keys each would cost an iovec per key.
const minRunView = 256

// minWriterSum is the least part, in floats, whose frame the connection's
// writer sums instead of the caller (Table.send).
const minWriterSum = 16 << 10

// viewable reports whether p's values, width w, go to and from the
// caller's vector run by run: several runs, long enough on average.
func (p *part) viewable(w int) bool {
	return len(p.runs) > 1 && p.count*w >= minRunView*len(p.runs)
}

// appendViews appends the runs of vals to out as byte views, in order,
// without copying: a frame's payload is their concatenation.
func appendViews(out [][]byte, vals []float32, runs [][2]int, w int) [][]byte {
	for _, r := range runs {
		out = append(out, wire.F32Bytes(vals[r[0]*w:r[1]*w]))
	}
	return out
}

// viewLists recycle the lists of views that a frame of a part's runs is
// built from and that the reply to a pull over them is read into: a
// list of a hundred views per frame, each way, was most of what the
// two-server push+pull allocated.
var viewLists = sync.Pool{New: func() any { return new([][]byte) }}

func getViews() *[][]byte { return viewLists.Get().(*[][]byte) }

// putViews returns a list, dropping its references to the caller's memory.
func putViews(v *[][]byte) {
	clear(*v)
	*v = (*v)[:0]
	viewLists.Put(v)
}

// interleave orders parts round-robin over their servers, so that the
// first frame to every server is queued before the second to any: a range
// spread over servers then keeps every connection busy from the start
// instead of filling one server's queue first.
func interleave(parts []*part) []*part {
	if len(parts) < 2 {
		return parts
	}
	var by [][]*part
	idx := map[int]int{}
	for _, p := range parts {
		i, ok := idx[p.server]
		if !ok {
			i = len(by)
			idx[p.server] = i
			by = append(by, nil)
		}
		by[i] = append(by[i], p)
	}
	if len(by) == 1 {
		return parts
	}
	out := make([]*part, 0, len(parts))
	for k := 0; len(out) < len(parts); k++ {
		for _, ps := range by {
			if k < len(ps) {
				out = append(out, ps[k])
			}
		}
	}
	return out
}
