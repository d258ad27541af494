package ps

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/table"
)

// fakeCoord leases pieces of partitions pass by pass as the control-plane
// contract describes (package api): pieces [Start, End), progress replies
// that carry cut requests, splits, and a pass whose previous pass split
// a partition granting that partition's pieces' states together. It
// serves the partition loop's tests, which need no servers.
type fakeCoord struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change
	parts   int
	pass    int
	pieces  map[int][]*fakePiece // this pass's, by partition, in row order
	blobs   map[uint64][]byte    // state versions
	ver     uint64
	grants  uint64
	records []api.Update
	// check, when set, is called under mu with every update received; an
	// error fails the update.
	check   func(u api.Update) error
	granted []api.Grant
	// splits holds, by partition and start of the piece, a channel closed
	// when a split of the piece is asked for.
	splits map[[2]int]chan struct{}
}

type fakePiece struct {
	start, end, offset int // end: api.ToEnd or a row
	holder             int // -1 when free
	grant              uint64
	done               bool
	states             []uint64
	cut                *fakeCut
}

type fakeCut struct {
	from, thief int
	sent        bool
	answer      chan fakeAnswer
}

type fakeAnswer struct {
	g   api.Grant
	err error
}

func newFakeCoord(parts int) *fakeCoord {
	return &fakeCoord{changed: make(chan struct{}), parts: parts, pass: -1, blobs: map[uint64][]byte{}, splits: map[[2]int]chan struct{}{}}
}

// asked returns a channel closed when a split of partition p's piece that
// starts at start is asked for.
func (f *fakeCoord) asked(p, start int) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.askedLocked(p, start)
}

func (f *fakeCoord) askedLocked(p, start int) chan struct{} {
	ch := f.splits[[2]int{p, start}]
	if ch == nil {
		ch = make(chan struct{})
		f.splits[[2]int{p, start}] = ch
	}
	return ch
}

func (f *fakeCoord) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// startPass begins pass: a piece [0, ToEnd) per partition, with the
// states of the previous pass's pieces of it.
func (f *fakeCoord) startPass(pass int) {
	next := map[int][]*fakePiece{}
	for p := range f.parts {
		np := &fakePiece{end: api.ToEnd, holder: -1}
		for _, old := range f.pieces[p] {
			np.states = append(np.states, old.states...)
		}
		next[p] = []*fakePiece{np}
	}
	f.pass, f.pieces = pass, next
}

func (f *fakeCoord) passDone() bool {
	for _, ps := range f.pieces {
		for _, pc := range ps {
			if !pc.done {
				return false
			}
		}
	}
	return true
}

func (f *fakeCoord) Acquire(ctx context.Context, rank, pass int) (api.Grant, error) {
	for {
		f.mu.Lock()
		if pass > f.pass && (f.pass < 0 || f.passDone()) {
			f.startPass(pass)
		}
		if pass < f.pass || pass == f.pass && f.passDone() {
			f.mu.Unlock()
			return api.Grant{Partition: -1, Done: true}, nil
		}
		for p := range f.parts {
			for _, pc := range f.pieces[p] {
				if pc.holder < 0 && !pc.done {
					g := f.grantLocked(p, pc, rank)
					f.mu.Unlock()
					return g, nil
				}
			}
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return api.Grant{}, ctx.Err()
		}
	}
}

func (f *fakeCoord) grantLocked(p int, pc *fakePiece, rank int) api.Grant {
	f.grants++
	pc.holder, pc.grant = rank, f.grants
	g := api.Grant{Partition: p, Start: pc.start, Offset: pc.offset, End: pc.end, States: pc.states, Lease: pc.grant}
	f.granted = append(f.granted, g)
	return g
}

func (f *fakeCoord) Progress(_ context.Context, u api.Update) (api.ProgressReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.check != nil {
		if err := f.check(u); err != nil {
			return api.ProgressReply{}, err
		}
	}
	i, pc := f.pieceLocked(u.Partition, u.Lease)
	if pc == nil || pc.holder != u.Rank || u.Pass != f.pass {
		return api.ProgressReply{}, fmt.Errorf("%w: pass %d partition %d grant %d", api.ErrLeaseLost, u.Pass, u.Partition, u.Lease)
	}
	f.records = append(f.records, u)
	pc.offset = max(pc.offset, u.Offset)
	if u.HasState {
		pc.states = []uint64{f.putLocked(u.State)}
	}
	if u.Cut != nil {
		f.cutLocked(u.Partition, i, *u.Cut)
	}
	if u.Complete {
		pc.done, pc.holder = true, -1
		if pc.cut != nil {
			pc.cut.answer <- fakeAnswer{err: fmt.Errorf("%w: the piece is done", api.ErrNoSplit)}
			pc.cut = nil
		}
	}
	f.notify()
	r := api.ProgressReply{End: pc.end}
	if len(pc.states) == 1 {
		r.State = pc.states[0]
	}
	if pc.cut != nil && !pc.cut.sent {
		pc.cut.sent = true
		r.Cut = &api.CutRequest{From: pc.cut.from}
	}
	return r, nil
}

// cutLocked carries out the holder's answer to the cut of piece i.
func (f *fakeCoord) cutLocked(p, i int, c api.Cut) {
	pc := f.pieces[p][i]
	pending := pc.cut
	if pending == nil {
		return
	}
	pc.cut = nil
	if c.Declined {
		pending.answer <- fakeAnswer{err: fmt.Errorf("%w: the holder declined", api.ErrNoSplit)}
		return
	}
	tail := &fakePiece{start: c.At, end: pc.end, offset: c.At, holder: -1}
	if c.HasState {
		tail.states = []uint64{f.putLocked(c.State)}
	}
	pc.end = c.At
	f.pieces[p] = append(f.pieces[p][:i+1], append([]*fakePiece{tail}, f.pieces[p][i+1:]...)...)
	pending.answer <- fakeAnswer{g: f.grantLocked(p, tail, pending.thief)}
}

func (f *fakeCoord) putLocked(blob []byte) uint64 {
	f.ver++
	f.blobs[f.ver] = blob
	return f.ver
}

func (f *fakeCoord) pieceLocked(p int, grant uint64) (int, *fakePiece) {
	for i, pc := range f.pieces[p] {
		if pc.grant == grant {
			return i, pc
		}
	}
	return -1, nil
}

func (f *fakeCoord) Split(ctx context.Context, s api.Split) (api.Grant, error) {
	f.mu.Lock()
	var target *fakePiece
	for _, pc := range f.pieces[s.Partition] {
		if pc.start <= s.From && (pc.end == api.ToEnd || s.From < pc.end) {
			target = pc
		}
	}
	if s.Pass != f.pass || target == nil || target.done || target.holder < 0 || target.cut != nil {
		f.mu.Unlock()
		return api.Grant{}, fmt.Errorf("%w: no live piece of partition %d holds row %d", api.ErrNoSplit, s.Partition, s.From)
	}
	c := &fakeCut{from: s.From, thief: s.Rank, answer: make(chan fakeAnswer, 1)}
	target.cut = c
	close(f.askedLocked(s.Partition, target.start))
	f.mu.Unlock()
	select {
	case a := <-c.answer:
		return a.g, a.err
	case <-ctx.Done():
		return api.Grant{}, ctx.Err()
	}
}

func (f *fakeCoord) State(_ context.Context, _ int, ver uint64) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.blobs[ver]
	if !ok {
		return nil, fmt.Errorf("%w: version %d", api.ErrNoState, ver)
	}
	return b, nil
}

func (f *fakeCoord) Layout(context.Context, uint64) (*layout.Layout, error) {
	return nil, errors.New("fake coordinator: no layout")
}

func (f *fakeCoord) CreateTable(context.Context, table.Spec) (*layout.Layout, error) {
	return nil, errors.New("fake coordinator: no tables")
}

func (f *fakeCoord) Heartbeat(context.Context, int, int64) error { return nil }

func (f *fakeCoord) Leave(_ context.Context, rank int) error {
	f.release(rank)
	return nil
}

// release returns rank's pieces to the pool, as the coordinator does when
// a worker leaves or dies.
func (f *fakeCoord) release(rank int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ps := range f.pieces {
		for _, pc := range ps {
			if pc.holder == rank && !pc.done {
				pc.holder = -1
			}
		}
	}
	f.notify()
}

// piece returns partition p's piece of this pass that starts at start.
func (f *fakeCoord) piece(p, start int) fakePiece {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, pc := range f.pieces[p] {
		if pc.start == start {
			return *pc
		}
	}
	return fakePiece{start: -1}
}
