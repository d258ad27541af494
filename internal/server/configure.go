package server

import (
	"context"
	"fmt"

	"github.com/terrace-ml/terrace/internal/dataplane/wire"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/internal/storage/store"
)

// Configure installs layout l: new tables are created, and data messages
// are from now on checked against l's epoch. What the new layout calls for
// (copies to new chain members, pushes taken over from a failed head,
// checkpoints, clocks of finished workers) is started once the layout is
// installed and no lock is held.
func (s *Server) Configure(l *layout.Layout) error {
	if err := l.Validate(); err != nil {
		return err
	}
	rm, err := l.Ring()
	if err != nil {
		return fmt.Errorf("server %s: %w", s.opts.ID, err)
	}
	ch, err := newChains(l, rm)
	if err != nil {
		return fmt.Errorf("server %s: %w", s.opts.ID, err)
	}
	a, err := s.install(l, rm, ch)
	if err != nil {
		return err
	}
	s.follow(a)
	return nil
}

// installed is what installing a layout left to do once no lock is held.
type installed struct {
	old, cur chains
	// dropped are the streams to servers that left the layout.
	dropped []*replicator
	// took are the BSP pushes taken over from a failed head.
	took []tookOver
	// prevRebuild is closed when the previous layout's rebuild is done;
	// rebuilt is to close when this one's is.
	prevRebuild, rebuilt chan struct{}
	// prevRestore is closed when the previous load of a checkpoint is
	// done; restored is to close when this layout's (resume) is.
	prevRestore, restored chan struct{}
	checkpoint, resume    *layout.Checkpoint
	finished              []int
	// ready: the layout's cluster has formed (layout.Ready).
	ready bool
	// lossEpoch is the epoch of a fallback whose loss this server counts.
	lossEpoch uint64
	// flush are the streams to the BackupPS that a 2 -> 1 switch flushes
	// instead of copying (flush.go), by peer.
	flush map[string]flushMark
}

// install installs the layout under applyMu and mu: no push is applied
// while the layout changes, and none after it under the old one
// (applyNow checks): a server never applies a push to a slot it no longer
// heads.
func (s *Server) install(l *layout.Layout, rm *ring.Map, ch chains) (installed, error) {
	// A server missing from the layout has departed (drained or declared
	// failed): it keeps the map, owns nothing, and so refuses every data
	// request with a code that makes the client re-route.
	me := rm.Index(s.opts.ID)
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lay != nil && s.lay.Job != l.Job {
		s.nextJobLocked(l)
	}
	if err := s.addTables(l); err != nil {
		return installed{}, err
	}
	a := installed{old: s.chains, cur: ch}
	// Before the cluster is ready no server holds state: its layout
	// changes move nothing that a copy would have to make good.
	if old := s.chains; old.ring != nil && s.lay.Ready && changed(old, ch) {
		// Epochs are not contiguous (they are etcd revisions): a layout
		// names the epoch it follows.
		c := chainsChange{old: old, cur: ch, gap: ch.ring.Epoch != old.ring.Epoch && l.PrevEpoch != old.ring.Epoch}
		s.changes = append(s.changes, c)
		if c.gap || c.loses(s.opts.ID) {
			for _, r := range s.replicators() {
				r.cut()
			}
		}
	}
	if old := s.chains; old.ring == nil || changed(old, ch) {
		s.gen++
	}
	surely, maybe := fellBack(s.opts.ID, s.lay, l)
	s.lay, s.ring, s.me, s.chains = l, rm, me, ch
	s.pairMu.Lock()
	a.took = s.held.takeOver(&s.dedup, s.tables, rm, me)
	if maybe {
		// Before any re-send can reach this server under l (resolve
		// waits for l): the ledger counts from here.
		if n := s.ledger.freeze(rm.Epoch, func(sl uint64) bool { return rm.SlotOwner(sl) == me }); surely || n > 0 {
			a.lossEpoch = rm.Epoch
		}
	}
	s.pairMu.Unlock()
	s.countAndApply(l.Workers, a.took, me < 0)
	close(s.changed)
	s.changed = make(chan struct{})
	a.dropped = s.dropReplicators(ch)
	// A stage switch changes what a peer is: the stream to a BackupPS is
	// asynchronous, to a chain member synchronous. Changed under applyMu,
	// so that every push applied under this layout follows its policy.
	for _, r := range s.replicators() {
		r.setPolicy(s.policyOf(r.peer.ID, ch.isBackup(r.peer.ID)))
	}
	a.flush = s.flushMarks(l, a.old)
	// Rebuilds run one after another in layout order: a later one reports a
	// joiner synced only after the earlier ones' copies are acknowledged.
	a.prevRebuild, a.rebuilt = s.lastRebuild, make(chan struct{})
	s.lastRebuild = a.rebuilt
	if ck := l.Checkpoint; ck != nil && ck.Seq > s.ckptSeq && me >= 0 {
		s.ckptSeq = ck.Seq
		a.checkpoint = ck
	}
	if r := l.Resume; r != nil && (r.Seq != s.restoredSeq || r.Rewind != s.restoredRewind) {
		// Loaded once, under the first layout that asks: the slots a
		// server holds only shrink as more servers join, so this is a
		// superset of what it will hold.
		s.restoredSeq, s.restoredRewind = r.Seq, r.Rewind
		if r.Rewind > 0 {
			s.emptyTablesLocked()
		}
		a.resume = r
		// A load started over (a server left the ring during the one
		// before, docs/design/resilience.md) begins once the one before
		// has ended, so that nothing of it is written after this one
		// reports.
		a.prevRestore, a.restored = s.lastRestore, make(chan struct{})
		s.lastRestore = a.restored
	}
	a.finished, a.ready = l.Finished, l.Ready
	return a, nil
}

// countAndApply counts workers workers and defers or applies the BSP
// pushes taken over from a failed head. One whose clock has completed is
// applied before the layout that makes this server its keys' head is in
// force: a read answered under it must see it (the minimum already covers
// its clock). takeOver kept only the keys this server heads. A server off
// the data ring hears no clocks: it forgets which workers wait for work
// (consistency.offRing). The caller (install) holds applyMu and mu.
func (s *Server) countAndApply(workers int, took []tookOver, offRing bool) {
	s.clockMu.Lock()
	s.cons.resize(workers)
	if offRing {
		s.cons.offRing()
	}
	for i := range took {
		t := &took[i]
		t.due = !s.cons.deferPush(t.clock, t.worker, &t.push)
	}
	s.clockMu.Unlock()
	for _, t := range took {
		if t.due {
			s.applyPush(t.push.t, t.push.ks, t.push.vals, t.push.pair.Client, t.push.pair.Seq)
		}
	}
}

// addTables creates l's tables that the server does not have. The caller
// holds mu.
func (s *Server) addTables(l *layout.Layout) error {
	for _, t := range l.Tables {
		if old, ok := s.tables[t.ID]; ok {
			if old.spec != t.Spec {
				return fmt.Errorf("server %s: table %d changed its spec from %+v to %+v", s.opts.ID, t.ID, old.spec, t.Spec)
			}
			continue
		}
		st, err := store.New(t.Spec)
		if err != nil {
			return fmt.Errorf("server %s: table %q: %w", s.opts.ID, t.Spec.Name, err)
		}
		s.tables[t.ID] = &tableState{id: t.ID, spec: t.Spec, store: st}
	}
	return nil
}

// follow does what installing a layout left to do. The caller holds no
// lock.
func (s *Server) follow(a installed) {
	for _, r := range a.dropped {
		r.leave()
	}
	for _, t := range a.took {
		s.takeOver(t)
	}
	s.spawn(func(ctx context.Context) {
		defer close(a.rebuilt)
		if a.prevRebuild != nil {
			select {
			case <-a.prevRebuild:
			case <-ctx.Done():
				return
			}
		}
		if !a.ready {
			// Before the cluster forms a server holds nothing, or (a
			// resume) the checkpoint's slots of the first layout that
			// asked, a superset of what it will hold as more servers
			// join: there is nothing to copy. A copy begun anyway could
			// outlive its sender's term as head under the next layout
			// of the forming cluster; its peer refused it for good and
			// the job hung (mf resumed with more servers than wrote the
			// checkpoint, 2 runs of 3).
			s.reportSynced(a.cur)
			return
		}
		s.rebuild(ctx, a.old, a.cur, a.flush)
	})
	if ck := a.checkpoint; ck != nil {
		s.spawn(func(ctx context.Context) { s.checkpointTo(ctx, *ck) })
	}
	if r := a.resume; r != nil {
		s.spawn(func(ctx context.Context) {
			defer close(a.restored)
			if a.prevRestore != nil {
				select {
				case <-a.prevRestore:
				case <-ctx.Done():
					return
				}
			}
			s.restoreFrom(ctx, *r, a.cur)
		})
	}
	if a.lossEpoch != 0 {
		s.spawn(func(ctx context.Context) { s.countLoss(ctx, a.lossEpoch) })
	}
	// Workers that died or left no longer hold the others back.
	for _, w := range a.finished {
		_, _ = s.advanceClock(w, wire.ClockFinished) // a rank the layout does not count: nothing to release
	}
}

// takeOver replicates a BSP push taken over from a failed head to this
// server's own chains; one whose clock had completed (install applied it)
// is then replicated as state, the others are applied at the flush of
// their clock. A re-send of it waits until it is on the chains (dedup's
// durable).
func (s *Server) takeOver(t tookOver) {
	s.replicateDeferred(t.push, t.clock, t.worker, func(error) { close(t.durable) })
	if t.due {
		s.replicateApplied(&t.push)
	}
}

// replicators returns the server's streams.
func (s *Server) replicators() []*replicator {
	s.replMu.Lock()
	defer s.replMu.Unlock()
	out := make([]*replicator, 0, len(s.repl))
	for _, r := range s.repl {
		out = append(out, r)
	}
	return out
}

// dropReplicators forgets the streams to servers that left the layout and
// returns them, for the caller to stop (releasing the pushes that waited
// for them) once it holds no lock.
func (s *Server) dropReplicators(ch chains) []*replicator {
	s.replMu.Lock()
	defer s.replMu.Unlock()
	var gone []*replicator
	for id, r := range s.repl {
		if ch.final.Index(id) < 0 && ch.ring.Index(id) < 0 && !ch.isBackup(id) {
			gone = append(gone, r)
			delete(s.repl, id)
		}
	}
	return gone
}
