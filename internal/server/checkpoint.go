package server

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/storage/checkpoint"
	"github.com/terrace-ml/terrace/keyspace"
)

// A server's part of cluster checkpoint seq is the checkpoint seq under
// Dir/servers/<its id>: one file per table ("t<table id>") holding the
// keys of the slots it heads, so that each key is written once.

func partDir(dir, id string) string { return filepath.Join(dir, "servers", id) }

func tableFile(id uint32) string { return "t" + strconv.FormatUint(uint64(id), 10) }

// checkpointTo writes this server's part of checkpoint ck and reports.
func (s *Server) checkpointTo(ck layout.Checkpoint) {
	err := s.writeCheckpoint(ck)
	if err != nil {
		s.log.Warn("checkpoint failed", "seq", ck.Seq, "err", err)
	}
	if s.opts.OnCheckpointed != nil {
		s.opts.OnCheckpointed(ck.Seq, err)
	}
}

func (s *Server) writeCheckpoint(ck layout.Checkpoint) error {
	s.mu.RLock()
	rm := s.ring
	tables := make([]*tableState, 0, len(s.tables))
	for _, t := range s.tables {
		tables = append(tables, t)
	}
	s.mu.RUnlock()
	me := rm.Index(s.opts.ID)
	w, err := checkpoint.Create(partDir(ck.Dir, s.opts.ID), ck.Seq)
	if err != nil {
		return err
	}
	defer w.Abort()
	ctx := context.Background()
	for _, t := range tables {
		_, err := w.WriteTable(ctx, tableFile(t.id), t.spec, func(fn func(uint64, []float32, [][]float32) bool) {
			t.store.Range(0, ^uint64(0), func(k uint64, v []float32, st [][]float32) bool {
				if rm.SlotOwner(keyspace.Slot(k)) != me {
					return true
				}
				return fn(k, v, st)
			})
		})
		if err != nil {
			return fmt.Errorf("checkpoint %d: table %q: %w", ck.Seq, t.spec.Name, err)
		}
	}
	_, err = w.Commit(checkpoint.Meta{Epoch: uint64(ck.Pass)})
	return err
}

// restoreFrom loads, from every part of checkpoint ck, the keys of the
// slots this server holds (as head or along a chain) and reports.
func (s *Server) restoreFrom(ck layout.Checkpoint, ch chains) {
	n, err := s.restore(ck, ch)
	if err != nil {
		s.log.Warn("restore failed", "seq", ck.Seq, "err", err)
	} else {
		s.log.Info("restored from checkpoint", "seq", ck.Seq, "keys", n)
	}
	if s.opts.OnRestored != nil {
		s.opts.OnRestored(ck.Seq, err)
	}
}

func (s *Server) restore(ck layout.Checkpoint, ch chains) (int, error) {
	me := ch.final.Index(s.opts.ID)
	holds := func(sl uint64, scratch []int) ([]int, bool) {
		scratch = ch.final.Chain(sl, ch.k, scratch)
		for _, i := range scratch {
			if i == me {
				return scratch, true
			}
		}
		return scratch, false
	}
	ctx := context.Background()
	n := 0
	var scratch []int
	for _, id := range ck.Servers {
		c, err := checkpoint.Open(ctx, partDir(ck.Dir, id), ck.Seq)
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
				var ok bool
				if scratch, ok = holds(keyspace.Slot(k), scratch); ok {
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
