package server

import (
	"slices"

	"github.com/terrace-ml/terrace/internal/placement/layout"
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
