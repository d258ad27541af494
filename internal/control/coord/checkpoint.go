package coord

import (
	"fmt"
	"maps"
	"slices"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/layout"
)

// Cluster checkpoints are taken at pass boundaries: when every partition
// of a pass is complete, every push of it is acknowledged, and holding
// the next pass's work until the servers have written leaves them
// quiescent, so the checkpoint is one consistent model. The machine asks
// through the layout (Layout.Checkpoint), collects the servers' reports,
// and then hands the driver a Commit, whose record the driver writes last
// (checkpoint.CommitCluster) and reports with Committed.

// Commit asks the driver to write checkpoint Seq's commit record, with
// the partitions' states (versions in row order, by partition).
type Commit struct {
	Dir        string
	Seq        uint64
	Pass       int // the last pass completed
	Servers    []string
	Tables     []layout.Table
	Partitions int
	MaxClock   int64
	States     map[int][]uint64
	// Job is the job trained (nil if none was submitted): what terrace
	// export needs to read the model (its data, for lr's scaling).
	Job *api.Job
	// JobNumber numbers that job among the cluster's, from 1.
	JobNumber uint64
}

// CheckpointStat describes a committed checkpoint.
type CheckpointStat struct {
	Seq     uint64  `json:"seq"`
	Pass    int     `json:"pass"`
	Seconds float64 `json:"seconds"`
}

// startCheckpoint asks for a checkpoint after pass e, if one is due.
func (m *Machine) startCheckpoint(e int) {
	ck := &m.st.Checkpoint
	due := ck.Requested || m.cfg.CheckpointEvery > 0 && (e+1)%m.cfg.CheckpointEvery == 0
	if m.cfg.CheckpointDir == "" || !due || m.st.Layout.Checkpoint != nil {
		return
	}
	ck.Requested = false
	ck.Seq++
	var ids []string
	for _, s := range m.st.Layout.Servers {
		ids = append(ids, s.ID)
	}
	m.st.Layout.Checkpoint = &layout.Checkpoint{Dir: m.cfg.CheckpointDir, Seq: ck.Seq, Pass: e, Servers: ids}
	ck.Reported, ck.Started = map[string]bool{}, m.now
	m.dirty = true
	m.note(api.EventCheckpoint, "", fmt.Sprintf("checkpoint %d after pass %d begins", ck.Seq, e+1)) // counted from 1, as people read it
}

// RequestCheckpoint asks for a checkpoint at the next pass boundary, or
// at once when the job is done (its servers are quiescent and still hold
// the trained model). It replies the sequence number of the checkpoint
// that will serve the request: the next one to begin, since one already
// in progress began at a boundary before the request.
func (m *Machine) RequestCheckpoint(id uint64) {
	switch {
	case m.cfg.CheckpointDir == "":
		m.fail(id, fmt.Errorf("%w: the coordinator has no checkpoint directory (--checkpoint-dir)", api.ErrBadRequest))
		return
	case m.st.Layout.Shutdown:
		m.fail(id, fmt.Errorf("%w: the job is done and its servers are shutting down", api.ErrBadRequest))
		return
	}
	if !m.st.Checkpoint.Requested {
		m.st.Checkpoint.Requested, m.dirty = true, true
	}
	m.reply(Reply{ID: id, Seq: m.st.Checkpoint.Seq + 1})
	m.checkpointIfDone()
}

// checkpointIfDone begins a requested checkpoint of a finished job: no
// pass boundary is left to begin it at.
func (m *Machine) checkpointIfDone() {
	if m.st.Layout.JobDone && !m.st.Layout.Shutdown && m.st.Checkpoint.Requested && m.st.DoneBefore > 0 {
		seq := m.st.Checkpoint.Seq
		if m.startCheckpoint(m.st.DoneBefore - 1); m.st.Checkpoint.Seq != seq {
			m.publish()
		}
	}
}

// Checkpointed records that a server wrote its part of a checkpoint, or
// failed to: the checkpoint is committed once every server named in it
// has written, and abandoned on the first failure.
func (m *Machine) Checkpointed(id uint64, c api.Checkpointed) {
	defer m.reply(Reply{ID: id})
	ck := m.st.Layout.Checkpoint
	if ck == nil || ck.Seq != c.Seq || m.committing {
		return
	}
	if c.Error != "" {
		m.log.Warn("checkpoint abandoned", "seq", c.Seq, "server", c.From, "err", c.Error)
		m.note(api.EventCheckpoint, c.From, fmt.Sprintf("checkpoint %d abandoned: %s", c.Seq, c.Error))
		m.st.Checkpoint.Abandoned, m.st.Checkpoint.Why = c.Seq, fmt.Sprintf("server %s: %s", c.From, c.Error)
		m.st.Layout.Checkpoint = nil
		m.publish()
		m.checkpointIfDone()
		return
	}
	if !m.st.Checkpoint.Reported[c.From] {
		m.st.Checkpoint.Reported = mapWith(m.st.Checkpoint.Reported, c.From)
		m.dirty = true
	}
	m.commitIfReported()
}

// commitIfReported hands out the Commit once every server named in the
// checkpoint in progress has written its part (again after a failover,
// since the previous leader may have died before writing the record).
func (m *Machine) commitIfReported() {
	ck := m.st.Layout.Checkpoint
	if ck == nil || m.committing || slices.ContainsFunc(ck.Servers, func(s string) bool { return !m.st.Checkpoint.Reported[s] }) {
		return
	}
	m.committing = true
	m.out.Commit = &Commit{Dir: ck.Dir, Seq: ck.Seq, Pass: ck.Pass, Servers: slices.Clone(ck.Servers),
		Tables: slices.Clone(m.st.Layout.Tables), Partitions: m.st.Layout.Partitions, MaxClock: m.st.MaxClock,
		States: m.partStates(), Job: m.st.Job, JobNumber: m.st.Layout.Job + 1}
}

// partStates copies the partitions' states.
func (m *Machine) partStates() map[int][]uint64 {
	out := make(map[int][]uint64, len(m.st.PartStates))
	for p, vs := range m.st.PartStates {
		if len(vs) > 0 {
			out[p] = slices.Clone(vs)
		}
	}
	return out
}

// Committed reports the outcome of a Commit: the next pass goes on either
// way (a failed checkpoint is logged, and the next one is due as usual).
func (m *Machine) Committed(seq uint64, err error) {
	ck := m.st.Layout.Checkpoint
	if ck == nil || ck.Seq != seq {
		return
	}
	m.committing = false
	if err != nil {
		m.log.Warn("checkpoint not committed", "seq", seq, "err", err)
		m.st.Checkpoint.Abandoned, m.st.Checkpoint.Why = seq, "commit record: "+err.Error()
	} else {
		m.ckptDone = append(m.ckptDone, CheckpointStat{Seq: seq, Pass: ck.Pass, Seconds: m.now.Sub(m.st.Checkpoint.Started).Seconds()})
		m.st.Checkpoint.Committed, m.st.Checkpoint.CommittedPass = seq, ck.Pass
		m.note(api.EventCheckpoint, "", fmt.Sprintf("checkpoint %d committed", seq))
	}
	m.st.Layout.Checkpoint = nil
	m.st.Checkpoint.Reported = nil
	m.publish()
	m.checkpointIfDone()
}

// checkpointStatus describes checkpoints for Status; nil without a
// checkpoint directory.
func (m *Machine) checkpointStatus() *api.CheckpointStatus {
	if m.cfg.CheckpointDir == "" {
		return nil
	}
	ck := &m.st.Checkpoint
	cs := &api.CheckpointStatus{Dir: m.cfg.CheckpointDir, Requested: ck.Requested, Seq: ck.Seq,
		Committed: ck.Committed, CommittedPass: ck.CommittedPass, Abandoned: ck.Abandoned, Why: ck.Why}
	if l := m.st.Layout.Checkpoint; l != nil {
		cs.InProgress, cs.Pass, cs.Servers = true, l.Pass, len(l.Servers)
		for _, s := range l.Servers {
			if ck.Reported[s] {
				cs.Written++
			}
		}
	}
	return cs
}

// Checkpoints lists the checkpoints this machine committed.
func (m *Machine) Checkpoints() []CheckpointStat { return slices.Clone(m.ckptDone) }

// Resumed is a committed checkpoint to start from: States counts, by
// partition, the state blobs it holds (in row order).
type Resumed struct {
	Dir        string
	Seq        uint64
	Pass       int
	Servers    []string
	Tables     []layout.Table
	Partitions int
	MaxClock   int64
	States     map[int]int
	// Job is the job the checkpoint was written by (nil if unknown).
	Job *api.Job
	// JobNumber numbers it among its cluster's jobs, from 1 (0 if
	// unknown: the first). The resumed job keeps it: a status, an event
	// or an export that says "job 1" of a cluster's third job names
	// another job.
	JobNumber uint64
	// Next is the smallest sequence number nothing under Dir uses (a
	// newer checkpoint passed over, or torn before its commit, may hold
	// some): the next checkpoint is numbered from it (0: after Seq). Numbered
	// Seq+1 instead, the first checkpoint after a resume from a torn
	// newest one was refused by every server and abandoned.
	Next uint64
}

// Resume starts a machine that nothing has joined from checkpoint r: its
// tables, its completed passes, and its partition states, under the
// versions it returns (for the driver to store the blobs under). The
// layout is not Ready until every server has loaded its slots (Restored).
func (m *Machine) Resume(r Resumed) map[int][]uint64 {
	m.st.Layout.Tables = slices.Clone(r.Tables)
	if r.Partitions > 0 {
		m.st.Layout.Partitions = r.Partitions
	}
	m.st.Passes, m.st.DoneBefore, m.st.MaxClock = map[int]*Pass{}, r.Pass+1, r.MaxClock
	m.st.Trained, m.st.TrainedFrom = 0, m.st.DoneBefore
	if r.Job != nil {
		j := *r.Job
		m.st.Job, m.st.ResumedJob = &j, true
	}
	if r.JobNumber > 0 {
		m.st.Layout.Job = r.JobNumber - 1
	}
	// Passes (numbered from 1) before the checkpoint's last are not
	// evaluated again: every worker would report the restored model under
	// each of their numbers.
	for p := 1; p <= r.Pass; p++ {
		m.st.Evals[p] = &Eval{Rank: -1, Result: &api.PassResult{Pass: p, Rank: -1, Restored: true}}
	}
	vers := map[int][]uint64{}
	for _, p := range slices.Sorted(maps.Keys(r.States)) {
		for range r.States[p] {
			m.st.NextStateVer++
			vers[p] = append(vers[p], m.st.NextStateVer)
		}
	}
	m.st.PartStates = vers
	m.st.Checkpoint.Seq = r.Seq
	if r.Next > r.Seq+1 {
		m.st.Checkpoint.Seq = r.Next - 1 // the next one begun is numbered Next
	}
	m.st.Layout.Resume = &layout.Checkpoint{Dir: r.Dir, Seq: r.Seq, Pass: r.Pass, Servers: slices.Clone(r.Servers)}
	m.st.Checkpoint.Restored = map[string]bool{}
	m.dirty = true
	return vers
}

// Restored records that a server has loaded its slots of the checkpoint
// resumed from; once every ring server has, the layout may become Ready.
func (m *Machine) Restored(id uint64, c api.Checkpointed) {
	r := m.st.Layout.Resume
	if r == nil || r.Seq != c.Seq {
		m.reply(Reply{ID: id})
		return
	}
	if c.Error != "" {
		// The resume checked every part (CheckServers); one that fails
		// here went bad since, or this server cannot reach the directory.
		// Said in the events, where status and the dashboard show it.
		m.note(api.EventCheckpoint, c.From, fmt.Sprintf("restore of checkpoint %d failed: %s", c.Seq, c.Error))
		m.fail(id, fmt.Errorf("coord: server %s could not restore checkpoint %d: %s", c.From, c.Seq, c.Error))
		return
	}
	m.st.Checkpoint.Restored = mapWith(m.st.Checkpoint.Restored, c.From)
	m.dirty = true
	m.reply(Reply{ID: id})
	l := &m.st.Layout
	if len(l.Servers)+m.st.Removed < m.cfg.Servers {
		return
	}
	for _, s := range l.Servers {
		if !m.st.Checkpoint.Restored[s.ID] {
			return
		}
	}
	l.Resume = nil
	m.st.Checkpoint.Restored = nil
	m.publish()
}

// mapWith returns set with key added, made if nil.
func mapWith(set map[string]bool, key string) map[string]bool {
	if set == nil {
		set = map[string]bool{}
	}
	set[key] = true
	return set
}
