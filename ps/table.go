package ps

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/table"
)

// Table is a handle on one parameter table.
type Table struct {
	c       *Client
	id      uint32
	spec    table.Spec
	enc     wire.Enc
	refused atomic.Int64
	filter  Filter
	plans   planCache
}

func newTable(c *Client, lt layout.Table) *Table {
	t := &Table{c: c, id: lt.ID, spec: lt.Spec}
	switch lt.Spec.Encoding {
	case table.Sparse:
		t.enc = wire.EncSparse
	case table.FP16:
		t.enc = wire.EncFP16
	case table.Int8:
		t.enc = wire.EncInt8
	}
	if lt.Spec.Significance > 0 {
		t.filter = NewSignificanceFilter(lt.Spec.Significance)
	}
	return t
}

// Spec returns the table's spec.
func (t *Table) Spec() table.Spec { return t.spec }

// Width is the number of float32 values per key.
func (t *Table) Width() int { return t.spec.Width }

// Refused is how many of this client's updates to the table the servers
// refused as non-finite.
func (t *Table) Refused() int64 { return t.refused.Load() }

// SetFilter installs a worker-side filter on pushes (replacing the
// significance filter the spec may have turned on); nil removes it.
func (t *Table) SetFilter(f Filter) { t.filter = f }

// Push sends vals (len(keys)*Width values) to be applied to keys, which
// must be sorted and unique.
func (t *Table) Push(keys []uint64, vals []float32) *Future {
	if err := t.check(keys, vals); err != nil {
		return failed(err)
	}
	if t.filter != nil {
		keys, vals = t.filter.Filter(keys, vals, t.spec.Width)
	}
	return t.start(&op{typ: wire.TPush, keys: keys, vals: vals})
}

// Pull fetches the values of keys (sorted, unique) into dst.
func (t *Table) Pull(keys []uint64, dst []float32) *Future {
	if err := t.check(keys, dst); err != nil {
		return failed(err)
	}
	return t.start(&op{typ: wire.TPull, keys: keys, dst: dst})
}

// PushPull pushes vals to keys and then pulls the keys' values into dst, in
// one round trip per server.
func (t *Table) PushPull(keys []uint64, vals, dst []float32) *Future {
	if err := t.check(keys, vals); err != nil {
		return failed(err)
	}
	if len(dst) != len(vals) {
		return failed(fmt.Errorf("%w: %d values to push but room for %d", ErrBadArgument, len(vals), len(dst)))
	}
	if t.filter != nil {
		pk, pv := t.filter.Filter(keys, vals, t.spec.Width)
		push := t.start(&op{typ: wire.TPush, keys: pk, vals: pv})
		pull := t.start(&op{typ: wire.TPull, keys: keys, dst: dst})
		return All(push, pull)
	}
	return t.start(&op{typ: wire.TPushPull, keys: keys, vals: vals, dst: dst})
}

// PushRange pushes vals to every key of r, a dense vector of r.Len()*Width values.
func (t *Table) PushRange(r keyspace.Range, vals []float32) *Future {
	if err := t.checkRange(r, vals); err != nil {
		return failed(err)
	}
	return t.start(&op{typ: wire.TPush, rng: r, isRange: true, vals: vals})
}

// PullRange pulls the values of every key of r into dst.
func (t *Table) PullRange(r keyspace.Range, dst []float32) *Future {
	if err := t.checkRange(r, dst); err != nil {
		return failed(err)
	}
	return t.start(&op{typ: wire.TPull, rng: r, isRange: true, dst: dst})
}

// PushPullRange pushes vals to every key of r and pulls the result into dst.
func (t *Table) PushPullRange(r keyspace.Range, vals, dst []float32) *Future {
	if err := t.checkRange(r, vals); err != nil {
		return failed(err)
	}
	if len(dst) != len(vals) {
		return failed(fmt.Errorf("%w: %d values to push but room for %d", ErrBadArgument, len(vals), len(dst)))
	}
	return t.start(&op{typ: wire.TPushPull, rng: r, isRange: true, vals: vals, dst: dst})
}

// Flush pushes whatever the table's filter holds back.
func (t *Table) Flush() *Future {
	fl, ok := t.filter.(Flusher)
	if !ok {
		return newFuture(0)
	}
	keys, vals := fl.Flush(t.spec.Width)
	if len(keys) == 0 {
		return newFuture(0)
	}
	return t.start(&op{typ: wire.TPush, keys: keys, vals: vals})
}

func (t *Table) check(keys []uint64, vals []float32) error {
	if err := keyspace.CheckSorted(keys); err != nil {
		return fmt.Errorf("%w: table %q: %w", ErrBadArgument, t.spec.Name, err)
	}
	if len(vals) != len(keys)*t.spec.Width {
		return fmt.Errorf("%w: table %q: %d values for %d keys of width %d", ErrBadArgument, t.spec.Name, len(vals), len(keys), t.spec.Width)
	}
	return nil
}

func (t *Table) checkRange(r keyspace.Range, vals []float32) error {
	if r.Hi <= r.Lo {
		return fmt.Errorf("%w: table %q: empty range %v", ErrBadArgument, t.spec.Name, r)
	}
	if uint64(len(vals)) != r.Len()*uint64(t.spec.Width) {
		return fmt.Errorf("%w: table %q: %d values for range %v of width %d", ErrBadArgument, t.spec.Name, len(vals), r, t.spec.Width)
	}
	return nil
}

// op is one Push, Pull or PushPull, cut into parts, one frame each.
type op struct {
	typ     wire.Type
	keys    []uint64
	rng     keyspace.Range
	isRange bool
	vals    []float32
	dst     []float32
	// pos maps this op's key positions to the caller's (a retried part
	// carries the positions of the op it came from); nil is the identity.
	pos      []int32
	f        *Future
	attempts atomic.Int32
	// ancestors are the sequence numbers of the parts a retried op re-sends:
	// a server that holds the effect of one of them skips the push.
	ancestors []uint64
	// root is the op the caller started; its seqs are every sequence number
	// its parts and their retries took, done when its future is.
	root  *op
	seqMu sync.Mutex
	seqs  []uint64
	// sums are the running CRC32Cs of a push spread over servers, summed
	// in the order of vals (spreadPlan).
	sums *spreadSums
}

func (o *op) n() int {
	if o.isRange {
		return int(o.rng.Len())
	}
	return len(o.keys)
}

// maxRetries bounds how often a part is re-sent after a refusal that a new
// layout or a reconnection may cure.
const maxRetries = 20

func (t *Table) start(o *op) *Future {
	if over := t.c.opts.MaxRefused; over > 0 && t.refused.Load() > over {
		return failed(fmt.Errorf("%w: table %q: %d refused (limit %d)", ErrNonFinite, t.spec.Name, t.refused.Load(), over))
	}
	o.f = &Future{done: make(chan struct{})}
	if o.n() == 0 {
		o.f.finish(nil)
		return o.f
	}
	o.f.remaining.Store(1)
	o.root = o
	if m := t.c.obs; m != nil {
		m.started(o, t.spec.Width)
	}
	if o.vals != nil {
		o.f.then(func(error) {
			o.seqMu.Lock()
			seqs := o.seqs
			o.seqMu.Unlock()
			for _, s := range seqs {
				t.c.seqs.done(s)
			}
		})
	}
	t.run(o)
	return o.f
}

// run plans o under the current range map and sends its parts; the caller
// holds one count of o.f.remaining for o, which run releases.
func (t *Table) run(o *op) {
	rm, conns, err := t.c.current()
	if err != nil {
		o.f.partDone(err)
		return
	}
	pl := t.plans.get(t, rm, o)
	if pl.spread != nil && o.vals != nil {
		o.sums = pl.spread.start(o.vals)
	}
	o.f.remaining.Add(int64(len(pl.parts)))
	for _, p := range pl.parts {
		var seq uint64
		if o.vals != nil {
			seq = t.c.seqs.next()
			o.root.seqMu.Lock()
			o.root.seqs = append(o.root.seqs, seq)
			o.root.seqMu.Unlock()
		}
		t.send(o, rm, conns, pl, p, seq)
	}
	o.f.partDone(nil)
}

func (t *Table) send(o *op, rm *ring.Map, conns map[string]*transport.Client, pl *plan, p *part, seq uint64) {
	srv := rm.Servers[p.server]
	cc := conns[srv.ID]
	if cc == nil || cc.Err() != nil {
		go t.retry(o, p, 0, seq, fmt.Errorf("ps: server %s: no connection", srv.ID))
		return
	}
	w := t.spec.Width
	d := wire.Data{Table: t.id, Worker: uint32(max(t.c.opts.Rank, -1)), Clock: t.c.clock.Load(), Count: uint32(p.count), Width: uint32(w), Seq: seq, Ancestors: o.ancestors}
	if seq != 0 {
		d.Acked = t.c.seqs.watermark()
	}
	if t.c.opts.Rank < 0 {
		d.Worker = wire.NoWorker
	}
	switch {
	case o.isRange:
		d.Kind, d.Lo, d.Hi = wire.KeysRange, p.lo, p.hi
	case pl.reuse.Load() && p.cachedOn.Load() == cc:
		d.Kind, d.CacheID = wire.KeysCached, p.cacheID
	case pl.reuse.Load():
		d.Kind, d.CacheID, d.Keys = wire.KeysCache, p.cacheID, p.keys
		p.cachedOn.Store(cc)
	default:
		d.Kind, d.Keys = wire.KeysExplicit, p.keys
	}
	var written func(error)
	var pre [wire.DataPrefixSize]byte
	var views *[][]byte // the frame's parts, when it points at the caller's runs
	if o.vals != nil {
		d.Enc = t.enc
		if d.Enc == wire.EncRaw && p.viewable(w) {
			views = getViews()
			defer putViews(views) // the frame keeps its own list of its parts
			*views = appendViews(append(*views, d.Parts(&pre)...), o.vals, p.runs, w)
		} else {
			var v []float32
			if len(p.runs) == 1 {
				v = gather(o.vals, p.runs, p.count, w)
			} else {
				v, written = gatherInto(o.vals, p.runs, p.count, w)
			}
			if d.Enc == wire.EncSparse && !wire.SparseWorthIt(v) {
				d.Enc = wire.EncRaw
			}
			d.Vals = wire.EncodeValues(d.Enc, v, nil)
		}
	}
	var parts [][]byte
	if views != nil {
		parts = *views
	} else {
		parts = d.Parts(&pre)
	}
	id := cc.NextID()
	// A frame of values goes unsummed to the connection, whose writer sums
	// it (on a plain connection) just before the kernel copies it: summed
	// here, a round's frames were all read once from memory for the sum,
	// and again, out of the cache by then, for the copy.
	fr := wire.NewFrameOn(wire.Header{Type: o.typ, Epoch: rm.Epoch, ReqID: id}, cc.Authenticated() || o.vals != nil && p.count*w >= minWriterSum, parts...)
	if views != nil && o.sums != nil && p.spread != nil {
		fr.SumTailWith(len(p.runs), func(crc uint32) uint32 { return o.sums.extend(p.spread, crc) })
	}
	cc.Call(fr, id, &transport.Call{
		OnReply: func(h wire.Header, r *wire.Reader) error { return t.onReply(o, p, srv.ID, rm.Epoch, seq, h, r) },
		// The server may have applied a push before the connection broke;
		// sending it again under the same seq is safe, as servers and their
		// replicas remember which (client, seq) pairs they hold.
		OnFail: func(err error) { go t.retry(o, p, 0, seq, err) },
	}, written)
}

// gather returns the values of a part: a view when its keys are one run of
// the op, a copy otherwise.
func gather(vals []float32, runs [][2]int, count, w int) []float32 {
	if len(runs) == 1 {
		return vals[runs[0][0]*w : runs[0][1]*w]
	}
	out := make([]float32, 0, count*w)
	for _, r := range runs {
		out = append(out, vals[r[0]*w:r[1]*w]...)
	}
	return out
}

func (t *Table) onReply(o *op, p *part, server string, epoch, seq uint64, h wire.Header, r *wire.Reader) error {
	if h.Type == wire.TError {
		return t.onError(o, p, server, epoch, seq, h, r)
	}
	if h.Type != wire.TReply {
		return fmt.Errorf("%w: %v frame in reply to %v", wire.ErrCorrupt, h.Type, o.typ)
	}
	refused, err := t.readReply(o, p, h, r)
	if err != nil {
		return err
	}
	if refused > 0 {
		t.refused.Add(int64(refused))
		o.f.refused.Add(int64(refused))
		if over := t.c.opts.MaxRefused; over > 0 && t.refused.Load() > over {
			o.f.partDone(fmt.Errorf("%w: table %q: %d refused (limit %d)", ErrNonFinite, t.spec.Name, t.refused.Load(), over))
			return nil
		}
	}
	o.f.partDone(nil)
	return nil
}

// onError handles a server's refusal of part p: a placement refusal
// re-sends the part (after a newer layout, if the server has one), any
// other completes it with the error.
func (t *Table) onError(o *op, p *part, server string, epoch, seq uint64, h wire.Header, r *wire.Reader) error {
	pay, err := r.Payload(h)
	if err != nil {
		return err
	}
	code, msg, err := wire.ParseError(pay)
	if err != nil {
		return err
	}
	serr := &ServerError{Server: server, Code: code, Msg: msg}
	switch code {
	case wire.CodeStaleEpoch, wire.CodeNotOwner, wire.CodeUnknownKeySet, wire.CodeUnknownTable, wire.CodeNotConfigured:
		if code == wire.CodeUnknownKeySet {
			p.cachedOn.Store(nil)
		}
		// Fetch a newer layout only if the server has one; a server
		// still behind this client's layout just needs a moment.
		seen := uint64(0)
		if h.Epoch > epoch {
			seen = epoch
		}
		go t.retry(o, p, seen, seq, serr)
	default:
		o.f.partDone(serr)
	}
	return nil
}

// readReply reads a reply to part p, the values of a pull into the
// caller's destination, and returns the count of updates refused.
func (t *Table) readReply(o *op, p *part, h wire.Header, r *wire.Reader) (uint32, error) {
	w := t.spec.Width
	if o.dst == nil {
		pay, err := r.Payload(h)
		if err != nil {
			return 0, err
		}
		n, rest, err := wire.ParseReply(pay)
		if err != nil {
			return 0, err
		}
		if len(rest) != 0 {
			return 0, fmt.Errorf("%w: push reply with %d value bytes", wire.ErrCorrupt, len(rest))
		}
		return n, nil
	}
	if int(h.Len) != wire.ReplyPrefixSize+4*p.count*w {
		return 0, fmt.Errorf("%w: reply of %d bytes for %d values", wire.ErrCorrupt, h.Len, p.count*w)
	}
	if len(p.runs) == 1 && o.pos == nil {
		// Straight from the socket into the caller's vector.
		var pre [wire.ReplyPrefixSize]byte
		dst := o.dst[p.runs[0][0]*w : p.runs[0][1]*w]
		if err := r.ReadPayloadSplit(h, pre[:], wire.F32Bytes(dst)); err != nil {
			return 0, err
		}
		refused, _, _ := wire.ParseReply(pre[:])
		return refused, nil
	}
	if o.pos == nil && p.viewable(w) {
		// Long runs (a range spread over servers): straight from the
		// socket into each run of the caller's vector.
		var pre [wire.ReplyPrefixSize]byte
		views := getViews()
		*views = appendViews(*views, o.dst, p.runs, w)
		err := r.ReadPayloadVec(h, pre[:], *views)
		putViews(views)
		if err != nil {
			return 0, err
		}
		refused, _, _ := wire.ParseReply(pre[:])
		return refused, nil
	}
	pay, err := r.Payload(h)
	if err != nil {
		return 0, err
	}
	n, rest, err := wire.ParseReply(pay)
	if err != nil {
		return 0, err
	}
	scatter(o.dst, wire.BytesF32(rest), p.runs, o.pos, w)
	return n, nil
}

func scatter(dst, src []float32, runs [][2]int, pos []int32, w int) {
	off := 0
	for _, r := range runs {
		if pos == nil {
			off += copy(dst[r[0]*w:r[1]*w], src[off:])
			continue
		}
		for i := r[0]; i < r[1]; i++ {
			j := int(pos[i])
			off += copy(dst[j*w:(j+1)*w], src[off:off+w])
		}
	}
}

// retry re-sends part p of o after a refusal or a broken connection: it
// gets a newer layout when the refusal says the map was stale, and sends
// the part's keys again, re-split under the map it then has.
func (t *Table) retry(o *op, p *part, seenEpoch, seq uint64, cause error) {
	n := o.attempts.Add(1)
	if n > maxRetries || t.c.isClosed() {
		o.f.partDone(fmt.Errorf("ps: table %q: giving up after %d attempts: %w", t.spec.Name, n, cause))
		return
	}
	time.Sleep(time.Duration(n) * 5 * time.Millisecond)
	if se := (*ServerError)(nil); seenEpoch == 0 && errors.As(cause, &se) {
		// A placement refusal under this client's epoch: the server
		// is behind, or not the one this client means (checkServer).
		t.c.checkServer(se.Server)
	}
	wait := t.c.opts.ServerWait
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	err := t.c.refreshLayout(ctx, seenEpoch)
	cancel()
	switch {
	case err != nil && errors.Is(err, ErrNoServer) && !errors.Is(err, ErrDrained):
		o.f.partDone(fmt.Errorf("ps: table %q: no server of the layout answered within %v (ServerWait): %w (after %w)", t.spec.Name, wait, err, cause))
		return
	case err != nil:
		o.f.partDone(fmt.Errorf("ps: table %q: %w (after %w)", t.spec.Name, err, cause))
		return
	}
	anc := o.ancestors
	if seq != 0 {
		anc = append(slices.Clone(anc), seq)
		if len(anc) > wire.MaxAncestors {
			o.f.partDone(fmt.Errorf("ps: table %q: push re-sent %d times: %w", t.spec.Name, len(anc), cause))
			return
		}
	}
	sub := &op{typ: o.typ, f: o.f, root: o.root, ancestors: anc, keys: make([]uint64, 0, p.count), pos: make([]int32, 0, p.count)}
	w := t.spec.Width
	if o.vals != nil {
		sub.vals = make([]float32, 0, p.count*w)
	}
	sub.dst = o.dst
	for _, r := range p.runs {
		for i := r[0]; i < r[1]; i++ {
			if o.isRange {
				sub.keys = append(sub.keys, o.rng.Lo+uint64(i))
			} else {
				sub.keys = append(sub.keys, o.keys[i])
			}
			orig := int32(i)
			if o.pos != nil {
				orig = o.pos[i]
			}
			sub.pos = append(sub.pos, orig)
			if o.vals != nil {
				sub.vals = append(sub.vals, o.vals[i*w:(i+1)*w]...)
			}
		}
	}
	if o.dst == nil {
		sub.pos = nil
	}
	sub.attempts.Store(n)
	t.run(sub) // takes over the count that p held
}

func (c *Client) isClosed() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.closed
}

// plan is how one key list or range splits into parts under one map.
type plan struct {
	epoch uint64
	keys  []uint64 // the key list, to tell a hash collision from a hit
	rng   keyspace.Range
	parts []*part
	// spread sums a push's parts in the order of the caller's vector.
	spread *spreadPlan
	// reuse turns on key caching once a key list is seen a second time, so
	// that one-off lists do not fill the servers' caches.
	reuse atomic.Bool
}

// part is the share of one server, small enough for one frame.
type part struct {
	server   int
	runs     [][2]int // positions in the op, as [from,to) runs
	count    int
	keys     []uint64 // keyed parts
	lo, hi   uint64   // range parts
	cacheID  uint32
	cachedOn atomic.Pointer[transport.Client]
	// spread is the part's share of each region of its plan's spread, if
	// its writer sums it that way.
	spread []spreadShare
}

// maxPartKeys is how many keys one frame carries: FrameTarget bytes of
// values, and of keys when the op names them.
func (t *Table) maxPartKeys(isRange bool) int {
	per := 4 * t.spec.Width
	if !isRange {
		per += 8
	}
	return max(1, wire.FrameTarget/per)
}

func (t *Table) buildPlan(rm *ring.Map, o *op) *plan {
	pl := &plan{epoch: rm.Epoch}
	limit := t.maxPartKeys(o.isRange)
	runs := make([][][2]int, len(rm.Servers))
	add := func(s, from, to int) {
		rs := runs[s]
		if n := len(rs); n > 0 && rs[n-1][1] == from {
			rs[n-1][1] = to
		} else {
			rs = append(rs, [2]int{from, to})
		}
		runs[s] = rs
	}
	if o.isRange {
		pl.rng = o.rng
		for s := range rm.Servers {
			rm.OwnedRuns(o.rng, s, func(lo, hi uint64) { add(s, int(lo-o.rng.Lo), int(hi-o.rng.Lo)) })
		}
	} else {
		pl.keys = o.keys
		for i := 0; i < len(o.keys); {
			sl := keyspace.Slot(o.keys[i])
			j := i + 1
			for j < len(o.keys) && keyspace.Slot(o.keys[j]) == sl {
				j++
			}
			add(rm.SlotOwner(sl), i, j)
			i = j
		}
	}
	var align func(int) int
	brk := -1
	if o.isRange {
		align = unitAlign(o.rng.Lo)
		if end := uint64(keyspace.SpreadSlots * keyspace.SlotSize); len(rm.Servers) > 1 && o.rng.Lo < end && end < o.rng.Hi {
			brk = int(end - o.rng.Lo)
		}
	}
	pl.parts = interleave(t.cutParts(runs, limit, align, brk))
	if o.isRange && len(rm.Servers) > 1 {
		pl.spread = newSpreadPlan(pl.parts, t.spec.Width)
	}
	for _, p := range pl.parts {
		if o.isRange {
			p.lo = o.rng.Lo + uint64(p.runs[0][0])
			p.hi = o.rng.Lo + uint64(p.runs[len(p.runs)-1][1])
			continue
		}
		if len(p.runs) == 1 {
			p.keys = o.keys[p.runs[0][0]:p.runs[0][1]]
			continue
		}
		p.keys = make([]uint64, 0, p.count)
		for _, r := range p.runs {
			p.keys = append(p.keys, o.keys[r[0]:r[1]]...)
		}
	}
	return pl
}

// cutParts cuts each server's runs into parts of at most limit keys. With
// align set, a cut inside a run goes back to the position align gives, or
// else to the run's start; only a part that would hold nothing then is cut
// where the limit falls. A part never holds positions on both sides of
// brk (none if negative): a range's slots placed one by one (the first
// keyspace.SpreadSlots) go in parts of their own, which the servers copy
// and look up slot by slot, so that every other part lies in whole dense
// groups and is answered from the store's memory (server.replyPinned);
// one part that mixed both was copied whole.
func (t *Table) cutParts(runs [][][2]int, limit int, align func(int) int, brk int) []*part {
	var parts []*part
	for s, rs := range runs {
		var cur *part
		full := true
		for _, r := range splitAt(rs, brk) {
			if brk >= 0 && r[0] >= brk && !full && cur.runs[len(cur.runs)-1][1] <= brk {
				full = true
			}
			for r[0] < r[1] {
				if full {
					cur = &part{server: s, cacheID: t.c.nextKey.Add(1)}
					parts = append(parts, cur)
				}
				take := min(r[1]-r[0], limit-cur.count)
				full = cur.count+take == limit
				if take < r[1]-r[0] && align != nil {
					end := align(r[0] + take)
					switch {
					case end > r[0]:
						take, full = end-r[0], true
					case cur.count > 0:
						full = true // the next part starts with this run
						continue
					}
				}
				cur.runs = append(cur.runs, [2]int{r[0], r[0] + take})
				cur.count += take
				r[0] += take
			}
		}
	}
	return parts
}

// splitAt returns runs with the one that holds brk, if any, cut in two there.
func splitAt(runs [][2]int, brk int) [][2]int {
	for i, r := range runs {
		if r[0] < brk && brk < r[1] {
			out := make([][2]int, 0, len(runs)+1)
			out = append(out, runs[:i]...)
			out = append(out, [2]int{r[0], brk}, [2]int{brk, r[1]})
			return append(out, runs[i+1:]...)
		}
	}
	return runs
}

// unitAlign returns, for a range from key lo, the last position at or
// before a given one where a placement unit begins. A range spread over
// servers is cut there rather than anywhere: the store's dense groups
// (whole within a unit) then each lie in one frame, and a group that
// one frame's pinned reply still holds is not written by the next frame's
// push, which would first move it to a new buffer (store.PinRun).
func unitAlign(lo uint64) func(int) int {
	const unitKeys = keyspace.SlotSize << keyspace.UnitBits
	return func(pos int) int {
		k := lo + uint64(pos)
		return pos - int(k%unitKeys)
	}
}

// planCache keeps the plans of recently used key lists and ranges. A key
// list's plan is kept from the second time the list is seen: keeping one
// costs a copy of the list (the caller may reuse its slice), which for a
// list used once, as most sparse lists are, was most of the client's time
// (fresh pages for each copy); the first sight records only its hash.
type planCache struct {
	mu    sync.Mutex
	byKey map[uint64]*plan
	seen  map[uint64]struct{} // hashes of key lists seen once
}

const maxPlans = 1024

func (c *planCache) get(t *Table, rm *ring.Map, o *op) *plan {
	if o.pos != nil {
		return t.buildPlan(rm, o) // a retry: one-off
	}
	var h uint64
	if o.isRange {
		h = keyspace.Mix64(o.rng.Lo) ^ keyspace.Mix64(o.rng.Hi+1)
	} else {
		h = hashKeys(o.keys)
	}
	c.mu.Lock()
	pl := c.byKey[h]
	_, again := c.seen[h]
	first := !o.isRange && !again && pl == nil
	if first {
		if c.seen == nil || len(c.seen) >= 4*maxPlans {
			c.seen = make(map[uint64]struct{})
		}
		c.seen[h] = struct{}{}
	}
	c.mu.Unlock()
	if first {
		return t.buildPlan(rm, o) // seen once: one-off, aliasing o.keys
	}
	if pl != nil && pl.epoch == rm.Epoch && pl.matches(o) {
		pl.reuse.Store(true)
		return pl
	}
	pl = t.buildPlan(rm, o)
	if !o.isRange {
		// Keep copies: the caller may reuse its key slice for another list.
		pl.keys = append([]uint64(nil), o.keys...)
		for _, p := range pl.parts {
			p.keys = append([]uint64(nil), p.keys...)
		}
		// The second sight: the list is in use again, so the servers
		// learn it now (as when the plan was kept from the first).
		pl.reuse.Store(again)
	}
	c.mu.Lock()
	if c.byKey == nil || len(c.byKey) >= maxPlans {
		c.byKey = make(map[uint64]*plan)
	}
	c.byKey[h] = pl
	delete(c.seen, h)
	c.mu.Unlock()
	return pl
}

func (pl *plan) matches(o *op) bool {
	if o.isRange {
		return pl.keys == nil && pl.rng == o.rng
	}
	if len(pl.keys) != len(o.keys) {
		return false
	}
	for i, k := range o.keys {
		if pl.keys[i] != k {
			return false
		}
	}
	return true
}

func hashKeys(keys []uint64) uint64 {
	h := uint64(len(keys))
	for _, k := range keys {
		h = (h ^ k) * 0x100000001b3
		h ^= h >> 29
	}
	return h
}
