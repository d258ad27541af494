package server

import (
	"slices"

	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/storage/store"
)

// nextJobLocked forgets the job before l's, on a cluster that runs jobs
// one after another (docs/design/jobs.md): the tables l no longer lists
// are dropped, and the clocks start again from a new consistency core.
// The old job's parked reads and deferred BSP pushes go with it: its
// workers reported (every push they made was acknowledged, so applied)
// and are gone. The next job's tables have IDs of their own, so nothing
// else keyed by table (dedup pairs, held pushes, what a stream knows its
// peers hold) can mix the jobs up. The caller holds applyMu and mu.
func (s *Server) nextJobLocked(l *layout.Layout) {
	for id := range s.tables {
		if !slices.ContainsFunc(l.Tables, func(t layout.Table) bool { return t.ID == id }) {
			delete(s.tables, id)
		}
	}
	s.clockMu.Lock()
	s.cons = consistency[func(), *bspPush]{}
	s.clockMu.Unlock()
	s.log.Info("next job: the old job's tables dropped, clocks restarted", "job", l.Job+1)
}

// emptyTablesLocked gives every table an empty store, before the live
// cluster loads a checkpoint again (layout.Checkpoint.Rewind,
// docs/design/resilience.md, "Going back to a checkpoint"): a key the
// checkpoint does not hold must read as it did then, unwritten. A
// request resolved under an older layout holds the old store, and is
// refused at its apply (the epoch changed); a copy or a push's state
// read from the old store and not sent yet is dropped (entry.rolledBack).
// The caller holds applyMu and mu.
func (s *Server) emptyTablesLocked() {
	for id, t := range s.tables {
		st, err := store.New(t.spec)
		if err != nil {
			// The spec made a store before: this cannot happen.
			s.log.Error("a table cannot be emptied before a rewind; it keeps its values", "table", t.spec.Name, "err", err)
			continue
		}
		t.emptied.Store(true)
		s.tables[id] = &tableState{id: id, spec: t.spec, store: st}
	}
	s.log.Warn("going back to a checkpoint: every table emptied before it loads again", "tables", len(s.tables))
}
