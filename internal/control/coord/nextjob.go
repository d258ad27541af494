package coord

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/ring"
)

// nextJob starts job j on a cluster whose job is done and that stays up:
// it forgets what belonged to the old job and keeps the servers
// (docs/design/jobs.md, "Jobs one after another"). The layout it
// publishes begins an epoch, so that every message of the new job's
// workers reaches a server only after the server has dropped the old
// job's tables and restarted its clocks.
func (m *Machine) nextJob(j api.Job) {
	st, l := &m.st, &m.st.Layout
	// Partition states nobody will resume from.
	for p, vers := range st.PartStates {
		for _, v := range vers {
			if v != 0 {
				m.out.Drops = append(m.out.Drops, StateRef{Partition: p, Version: v})
			}
		}
	}
	for _, w := range st.Passes {
		for p, pcs := range w.Parts {
			for _, pc := range pcs {
				for _, v := range pc.States {
					if ref := (StateRef{Partition: p, Version: v}); v != 0 && !slices.Contains(m.out.Drops, ref) {
						m.out.Drops = append(m.out.Drops, ref)
					}
				}
			}
		}
	}
	// The old job's workers that left or died are not the new job's:
	// status listed them as gone servers.
	for id := range st.Workers {
		delete(m.st.Gone, id)
	}
	st.Passes, st.DoneBefore, st.MaxClock, st.PartStates = map[int]*Pass{}, 0, 0, map[int][]uint64{}
	m.rewriteParts()
	st.Workers, st.Reports, st.Evals, st.RankClass = map[string]int{}, map[int]json.RawMessage{}, map[int]*Eval{}, nil
	forgetWorkers(st.Incarnations)
	forgetWorkers(st.Metrics)
	st.Checkpoint.Requested = false
	st.TableBase = m.lastTable()
	st.Job = &j
	m.beats, m.cutSince = map[int]time.Time{}, map[cutKey]time.Time{}
	// The ranks' clocks were the old job's: status showed the next job's
	// workers at them (7,994 and 7,985 before their first minibatch).
	m.clocks, m.beatClocks, m.entered = nil, nil, nil
	m.suspects = nil
	st.Trained, st.TrainedFrom = 0, 0
	st.TrainBegan, st.TrainedAt = time.Time{}, time.Time{}
	for _, w := range m.waiting {
		m.fail(w.id, fmt.Errorf("%w: the job ended", api.ErrLeaseLost))
	}
	m.waiting = nil

	l.Job++
	l.Tables, l.Finished, l.Workers = nil, nil, m.cfg.Workers
	l.JobDone, l.Shutdown, l.Ready = false, false, false
	m.note(api.EventJob, "", fmt.Sprintf("job %d: %s", l.Job+1, j.App))
	m.newEpoch()
	m.dropLeftRing()
	m.publish()
}

// dropLeftRing takes the last server that left after a job (leaveAtEnd:
// the layout kept it, as a ring is never empty) off the ring once the
// next job has begun and other servers joined to take its place: they go
// on the ring at once, as nothing is to be copied before the new job's
// first table. The next job waited for good, its joiners waiting for a
// copy from a server that was gone, and its workers timed out.
func (m *Machine) dropLeftRing() {
	l := &m.st.Layout
	left := func(s ring.Server) bool { return m.leftLast(s.ID) }
	if l.JobDone || len(l.Tables) > 0 || !slices.ContainsFunc(l.Servers, left) {
		return
	}
	servers := append(slices.DeleteFunc(slices.Clone(l.Servers), left), l.Joining...)
	if len(servers) == 0 {
		return
	}
	m.st.Removed += len(l.Servers) + len(l.Joining) - len(servers)
	for _, j := range l.Joining {
		delete(m.st.Synced, j.ID)
		m.note(api.EventRing, j.ID, "on the ring in place of the server that left after the last job: nothing to copy")
	}
	l.Servers, l.Joining, m.st.LastLeft = servers, nil, ""
	m.newEpoch()
	m.resetSync()
	m.publish()
}

// lastTable is the highest table ID used: a new table takes the next.
func (m *Machine) lastTable() uint32 {
	id := m.st.TableBase
	for _, t := range m.st.Layout.Tables {
		id = max(id, t.ID)
	}
	return id
}

// forgetWorkers deletes the workers' entries of a map keyed "role/id".
func forgetWorkers[V any](byNode map[string]V) {
	maps.DeleteFunc(byNode, func(k string, _ V) bool { return strings.HasPrefix(k, api.RoleWorker+"/") })
}

// jobEnds is what a coordinator tells of its jobs' ends: the highest job
// number that ended under it, and channels waiting for later ones.
type jobEnds struct {
	last  uint64
	waits map[uint64]chan struct{}
}

// JobEnded returns a channel closed once job number n (api.JobStatus's
// Number) has ended under this coordinator: every worker reported or is
// gone. A job that ended under an earlier leader does not close it.
func (c *Coordinator) JobEnded(n uint64) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan struct{})
	if n <= c.ends.last {
		close(ch)
		return ch
	}
	if w, ok := c.ends.waits[n]; ok {
		return w
	}
	if c.ends.waits == nil {
		c.ends.waits = map[uint64]chan struct{}{}
	}
	c.ends.waits[n] = ch
	return ch
}

// jobEndedLocked records that job n ended (0: none did); c.mu is held.
func (c *Coordinator) jobEndedLocked(n uint64) {
	if n <= c.ends.last {
		return
	}
	c.ends.last = n
	for k, ch := range c.ends.waits {
		if k <= n {
			close(ch)
			delete(c.ends.waits, k)
		}
	}
}
