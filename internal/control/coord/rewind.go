package coord

import (
	"fmt"
	"slices"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/layout"
)

// Going back to a checkpoint when slots lose every copy
// (docs/design/resilience.md): with OnCopiesLostResume, the layout that
// takes the last copy of some slots off asks the driver for the newest
// intact checkpoint (Ready.Rewind), and the machine takes the live
// cluster back to it (Rewound) as a resume would, without any process
// restarting: the pass's pieces are the checkpoint's, the leases granted
// before are revoked, and a layout that begins an epoch asks every server
// to empty its tables and load the checkpoint again (layout.Resume with
// a Rewind count); work is granted again once all have.

// CopiesLostPolicy is what the coordinator does when slots lose every
// copy: go on with them empty, or go back to the newest checkpoint.
type CopiesLostPolicy string

// The policies; the zero value is OnCopiesLostContinue.
const (
	OnCopiesLostContinue CopiesLostPolicy = "continue"
	OnCopiesLostResume   CopiesLostPolicy = "resume"
)

// ParseCopiesLostPolicy reads a --on-copies-lost value.
func ParseCopiesLostPolicy(s string) (CopiesLostPolicy, error) {
	switch p := CopiesLostPolicy(s); p {
	case OnCopiesLostContinue, OnCopiesLostResume:
		return p, nil
	case "":
		return OnCopiesLostContinue, nil
	}
	return "", fmt.Errorf("coord: --on-copies-lost %q: want continue or resume", s)
}

// RewindAsk is a decision to go back to a checkpoint, saved until the
// driver has read it (a new leader asks again).
type RewindAsk struct {
	// Loss is the loss that asked (State.CopiesLost when it did), found
	// under layout Version.
	Loss    int    `json:"loss"`
	Version uint64 `json:"version"`
}

// RewindRead asks the driver for the newest intact checkpoint under Dir,
// to report with Rewound.
type RewindRead struct {
	Dir string
}

// rewindOnLoss decides, at layout version (which lost every copy of some
// slots), whether the cluster goes back to its newest checkpoint; if it
// goes on, it says why when the policy asked otherwise.
func (m *Machine) rewindOnLoss(version uint64) {
	if m.cfg.OnCopiesLost != OnCopiesLostResume {
		return
	}
	l := &m.st.Layout
	why := ""
	switch {
	case m.cfg.CheckpointDir == "":
		why = "the coordinator has no --checkpoint-dir"
	case len(l.Tables) == 0 || l.JobDone:
		why = "no job is training"
	case l.Stage != 0:
		why = "the cluster has tiers: its BackupPS keep the slots"
	case l.Resume != nil || m.st.Rewind != nil:
		return // going back already: the servers load every slot again
	case m.st.Checkpoint.Committed == 0:
		why = "no checkpoint of this job was committed"
	case len(m.st.PartStates) > 0:
		why = "the job has partition states, which going back does not restore (not built)"
	}
	if why != "" {
		m.goOn(why)
		return
	}
	m.st.Rewind = &RewindAsk{Loss: m.st.CopiesLost, Version: version}
	m.out.Rewind = &RewindRead{Dir: m.cfg.CheckpointDir}
	m.dirty = true
}

// goOn says that the job goes on with the slots lost started again
// empty, as --on-copies-lost continue does, and why.
func (m *Machine) goOn(why string) {
	m.log.Warn("slots lost every copy and the job goes on without them: it cannot go back to a checkpoint", "why", why)
	m.note(api.EventCheckpoint, "", "not going back to a checkpoint after slots lost every copy: "+why+"; the job goes on with them started again empty")
	m.dirty = true
}

// askRewindAgain asks the driver again for the checkpoint of a decision
// a predecessor saved (RestoreMachine): it may have died before reading.
func (m *Machine) askRewindAgain() {
	if m.st.Rewind != nil {
		m.out.Rewind = &RewindRead{Dir: m.cfg.CheckpointDir}
	}
}

// Rewound takes the newest intact checkpoint the driver read for a
// decision to go back (err if there is none), and takes the live cluster
// back to it, or goes on and says why.
func (m *Machine) Rewound(r Resumed, err error) {
	if m.st.Rewind == nil {
		return
	}
	ask := m.st.Rewind
	m.st.Rewind, m.dirty = nil, true
	if err != nil {
		m.goOn("no intact checkpoint to go back to: " + err.Error())
		return
	}
	if why := m.cannotRewind(r); why != "" {
		m.goOn(fmt.Sprintf("checkpoint %d %s", r.Seq, why))
		return
	}
	m.rewind(r, ask.Version)
}

// cannotRewind says why the live cluster cannot go back to r; "" if it
// can.
func (m *Machine) cannotRewind(r Resumed) string {
	l := &m.st.Layout
	next := r.Pass + 1 // the pass a resume from it trains (InPass.check: the one it was taken inside)
	switch {
	case l.JobDone || len(l.Tables) == 0 || l.Resume != nil:
		return "came too late: the job ended, or the servers are loading a checkpoint"
	case r.JobNumber != l.Job+1 && !(r.JobNumber == 0 && l.Job == 0):
		return fmt.Sprintf("is of job %d, the cluster trains job %d", r.JobNumber, l.Job+1)
	case len(r.States) > 0 || len(m.st.PartStates) > 0:
		return "holds partition states, which going back does not restore (not built)"
	case next > m.st.DoneBefore:
		return fmt.Sprintf("resumes pass %d and the job trains pass %d: it is ahead of the job", next+1, m.st.DoneBefore+1)
	}
	for _, t := range r.Tables {
		if !slices.ContainsFunc(l.Tables, func(u layout.Table) bool { return u.ID == t.ID && u.Spec == t.Spec }) {
			return fmt.Sprintf("holds table %q, which is not the layout's", t.Spec.Name)
		}
	}
	return ""
}

// rewind takes the live cluster back to checkpoint r: the job is in r's
// pass again (rewindPasses), every lease granted before is revoked
// (revokeLeases), the checkpoint in progress is abandoned, and a layout
// that begins an epoch and is not ready asks every server to empty its
// tables and load r's slots (Restored makes it ready again once all
// have). Clocks stay: a worker's clock counts its steps, and the
// servers' reads wait on it.
func (m *Machine) rewind(r Resumed, lossVersion uint64) {
	st, l := &m.st, &m.st.Layout
	if ck := l.Checkpoint; ck != nil && !m.committing {
		why := fmt.Sprintf("the cluster goes back to checkpoint %d", r.Seq)
		m.note(api.EventCheckpoint, "", fmt.Sprintf("checkpoint %d abandoned: %s", ck.Seq, why))
		st.Checkpoint.Abandoned, st.Checkpoint.Why = ck.Seq, why
		st.Checkpoint.Now = false
		m.endCheckpoint()
	}
	m.rewindPasses(r)
	m.revokeLeases(r.Seq)
	load := m.nextLoad()
	st.Rewinds++
	where := fmt.Sprintf("after pass %d", r.Pass+1)
	if r.InPass != nil {
		where = fmt.Sprintf("inside pass %d", r.InPass.Pass+1)
	}
	st.LastRewind = fmt.Sprintf("back to checkpoint %d (%s) after the loss at layout v%d", r.Seq, where, lossVersion)
	l.Resume = &layout.Checkpoint{Dir: r.Dir, Seq: r.Seq, Pass: r.Pass, Servers: slices.Clone(r.Servers), Rewind: load}
	st.Checkpoint.Restored = map[string]bool{}
	l.Ready = false
	m.replaceDownLast() // found dead before: a server waiting to join takes its place
	m.log.Warn("slots lost every copy: the cluster goes back to the newest checkpoint", "seq", r.Seq, "where", where, "rewinds", st.Rewinds)
	m.note(api.EventCheckpoint, "", fmt.Sprintf("going back to checkpoint %d (%s): slots lost every copy; every server loads it again, the leases granted before are revoked and training goes on from its offsets", r.Seq, where))
	m.newEpoch()
	m.publish()
}

// rewindPasses puts the job back in checkpoint r's pass, its pieces
// free at r's offsets (or whole, from a boundary): the passes after it
// are trained and evaluated again.
func (m *Machine) rewindPasses(r Resumed) {
	next := r.Pass + 1 // as Resume: an InPass is of this pass (InPass.check)
	m.st.Passes, m.st.DoneBefore = map[int]*Pass{}, next
	m.rewriteParts()
	if r.InPass != nil {
		m.resumePass(r.InPass, nil)
	}
	for p := range m.st.Evals { // by passes complete, from 1
		if p > next {
			delete(m.st.Evals, p)
		}
	}
	m.cutSince = map[cutKey]time.Time{}
}

// revokeLeases revokes every lease granted so far and fails the parked
// asks for work and splits, going back to checkpoint seq: every live
// rank is behind until it asks of the job's pass again (behind).
func (m *Machine) revokeLeases(seq uint64) {
	m.st.RewoundGrants = m.st.Grants
	m.st.Behind = map[int]bool{}
	for _, rank := range m.st.Workers {
		if !m.finished(rank) {
			m.st.Behind[rank] = true
		}
	}
	for _, w := range m.waiting {
		err := fmt.Errorf("%w: the cluster goes back to checkpoint %d", api.ErrRewound, seq)
		if w.split != nil {
			err = fmt.Errorf("%w: the piece to split went back to checkpoint %d", api.ErrNoSplit, seq)
		}
		m.fail(w.id, err)
	}
	m.waiting = nil
}

// behind refuses, with api.ErrRewound, what rank asks of pass e (counted
// from 0) when the cluster went back before it and rank has not gone
// back yet; rank goes back once it asks of the pass the job is in or one
// before (ps.RunPasses starts its passes again on the refusal).
func (m *Machine) behind(rank, e int) error {
	if !m.st.Behind[rank] {
		return nil
	}
	if e <= m.st.DoneBefore {
		delete(m.st.Behind, rank)
		m.dirty = true
		return nil
	}
	return fmt.Errorf("%w: rank %d asks of pass %d, and the job is in pass %d (%s)", api.ErrRewound, rank, e+1, m.st.DoneBefore+1, m.st.LastRewind)
}

// rewinding reports whether the servers are loading a checkpoint the live
// cluster went back to.
func (m *Machine) rewinding() bool {
	r := m.st.Layout.Resume
	return r != nil && r.Rewind > 0
}

// nextLoad numbers a new load of a checkpoint gone back to: a server
// empties its tables and loads again at each number it has not loaded
// (a state saved before RewindLoads counted its loads by Rewinds).
func (m *Machine) nextLoad() int {
	m.st.RewindLoads = max(m.st.RewindLoads, m.st.Rewinds) + 1
	return m.st.RewindLoads
}

// reloadRewind starts the load of the checkpoint gone back to over, in
// the layout about to be published, after server left the ring during
// it: the servers loaded the slots of their chains on a ring with it, and
// its slots fall to servers that may not have loaded them. Every server
// empties its tables and loads again, and reports the new load
// (Restored counts only those). The load held for good on a server that
// was dead, or left slots to servers that had not loaded them.
func (m *Machine) reloadRewind(server string) {
	if !m.rewinding() {
		return
	}
	l := &m.st.Layout
	r := *l.Resume
	r.Rewind = m.nextLoad()
	l.Resume = &r
	m.st.Checkpoint.Restored = map[string]bool{}
	m.dirty = true
	m.log.Warn("a server left the ring while the servers load the checkpoint gone back to: every server loads it again", "server", server, "seq", r.Seq, "load", r.Rewind)
	m.note(api.EventCheckpoint, server, fmt.Sprintf("left the ring while the servers load checkpoint %d: every server loads it again on the ring without it", r.Seq))
}
