package server

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/storage/checkpoint"
	"github.com/terrace-ml/terrace/keyspace"
)

// A server's part of cluster checkpoint seq is the checkpoint seq under
// checkpoint.ServerDir(Dir, its id): one file per table ("t<table id>")
// holding the keys of the slots it heads, so that each key is written once.

func tableFile(id uint32) string { return "t" + strconv.FormatUint(uint64(id), 10) }

// checkpointTo writes this server's part of checkpoint ck and reports.
func (s *Server) checkpointTo(ctx context.Context, ck layout.Checkpoint) {
	err := s.writeCheckpoint(ctx, ck)
	if err != nil {
		s.log.Warn("checkpoint failed", "seq", ck.Seq, "err", err)
	}
	if s.opts.OnCheckpointed != nil {
		s.opts.OnCheckpointed(ck.Seq, err)
	}
}

func (s *Server) writeCheckpoint(ctx context.Context, ck layout.Checkpoint) error {
	s.mu.RLock()
	rm := s.ring
	s.mu.RUnlock()
	me := rm.Index(s.opts.ID)
	w, err := checkpoint.Create(checkpoint.ServerDir(ck.Dir, s.opts.ID), ck.Seq)
	if err != nil {
		return err
	}
	defer w.Abort()
	heads := bySlot(func(sl uint64) bool { return rm.SlotOwner(sl) == me })
	for _, t := range s.tableList() {
		_, err := w.WriteTable(ctx, tableFile(t.id), t.spec, func(fn func(uint64, []float32, [][]float32) bool) {
			t.store.Range(0, ^uint64(0), func(k uint64, v []float32, st [][]float32) bool {
				return !heads(k) || fn(k, v, st)
			})
		})
		if err != nil {
			return fmt.Errorf("checkpoint %d: table %q: %w", ck.Seq, t.spec.Name, err)
		}
	}
	_, err = w.Commit(checkpoint.Meta{Epoch: rm.Epoch, Pass: ck.Pass})
	return err
}

// bySlot returns in as a test of keys, asking once per slot of a walk in
// key order.
func bySlot(in func(slot uint64) bool) func(key uint64) bool {
	last, ok := ^uint64(0), false
	return func(k uint64) bool {
		if sl := keyspace.Slot(k); sl != last {
			last, ok = sl, in(sl)
		}
		return ok
	}
}

// restoreFrom loads, from every part of checkpoint ck, the keys of the
// slots this server holds (as head or along a chain) and reports.
func (s *Server) restoreFrom(ctx context.Context, ck layout.Checkpoint, ch chains) {
	n, err := s.restore(ctx, ck, ch)
	switch {
	case err != nil && ctx.Err() != nil:
		// The server is stopping (train refused the job and shut its
		// cluster down): nothing failed.
		s.log.Info("restore stopped: the server is stopping", "seq", ck.Seq)
	case err != nil:
		s.log.Warn("restore failed", "seq", ck.Seq, "err", err)
	default:
		s.log.Info("restored from checkpoint", "seq", ck.Seq, "keys", n)
	}
	if s.opts.OnRestored != nil {
		s.opts.OnRestored(ck.Seq, ck.Rewind, err)
	}
}

func (s *Server) restore(ctx context.Context, ck layout.Checkpoint, ch chains) (int, error) {
	me := ch.final.Index(s.opts.ID)
	var scratch []int
	holds := bySlot(func(sl uint64) bool {
		scratch = ch.final.Chain(sl, ch.k, scratch)
		return slices.Contains(scratch, me)
	})
	n := 0
	for _, id := range ck.Servers {
		c, err := checkpoint.Open(ctx, checkpoint.ServerDir(ck.Dir, id), ck.Seq)
		if err != nil {
			return n, fmt.Errorf("checkpoint %d of server %s: %w", ck.Seq, id, err)
		}
		for _, fi := range c.Files {
			tid, err := strconv.ParseUint(strings.TrimPrefix(fi.Name, "t"), 10, 32)
			if err != nil {
				return n, fmt.Errorf("checkpoint %d of server %s: file %q", ck.Seq, id, fi.Name)
			}
			s.mu.RLock()
			t := s.tables[uint32(tid)]
			s.mu.RUnlock()
			if t == nil || t.spec != fi.Spec {
				return n, fmt.Errorf("checkpoint %d: table %d is not in the layout as it was written", ck.Seq, tid)
			}
			err = c.ReadTable(ctx, fi.Name, func(k uint64, v []float32, st [][]float32) error {
				if holds(k) {
					t.store.Load(k, v, st)
					n++
				}
				return nil
			})
			if err != nil {
				return n, err
			}
		}
	}
	return n, nil
}
