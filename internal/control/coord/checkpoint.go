package coord

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
)

// Cluster checkpoints are taken at pass boundaries: when every partition
// of a pass is complete, every push of it is acknowledged, and holding
// the next pass's work until the servers have written leaves them
// quiescent, so the checkpoint is one consistent model. The machine asks
// through the layout (Layout.Checkpoint), collects the servers' reports,
// and then hands the driver a Commit, whose record the driver writes last
// (checkpoint.CommitCluster) and reports with Committed.
//
// A checkpoint asked for now (RequestCheckpoint's now, or a server's
// leave that leaves fewer servers than the chains' length) is taken
// inside the pass, holding only its end (checkpointHolds)
// (docs/design/resilience.md, "Checkpoints inside a pass"): the machine
// records the pieces' offsets as it asks (a worker reports an offset only
// once the pushes of the rows before it are acknowledged), so every part,
// written after, holds at least the rows before them. A resume puts the
// pieces back at those offsets; rows after them that the parts hold too
// are trained again.

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
	// InPass, for a checkpoint taken inside a pass, is that pass's
	// pieces as they were when it began (nil at a pass boundary).
	InPass *InPass
}

// InPass is a pass in progress when a checkpoint began inside it: its
// pieces, by partition in row order.
type InPass struct {
	Pass   int          `json:"pass"` // the pass in progress, from 0
	Pieces []SavedPiece `json:"pieces"`
}

// SavedPiece is a piece of a pass in progress, as a checkpoint keeps it:
// the rows [Start, End) of Partition (End api.ToEnd: to its end), those
// before Offset trained and their pushes acknowledged.
type SavedPiece struct {
	Partition int  `json:"partition"`
	Start     int  `json:"start"`
	Offset    int  `json:"offset"`
	End       int  `json:"end"`
	Done      bool `json:"done,omitempty"`
}

// ErrBadPieces: a commit record's pieces of the pass in progress do not
// tile its partitions.
var ErrBadPieces = errors.New("coord: the checkpoint's pieces of the pass in progress do not tile its partitions")

// check says whether ip's pieces tile each of partitions partitions from
// row 0 to its end, in order, each offset inside its piece, and ip
// follows pass, the last pass complete.
func (ip *InPass) check(pass, partitions int) error {
	if ip.Pass != pass+1 {
		return fmt.Errorf("%w: pass %d in progress after pass %d", ErrBadPieces, ip.Pass, pass)
	}
	next := make([]int, partitions) // where each partition's next piece starts; -2 once it reached the end
	for i, pc := range ip.Pieces {
		switch p := pc.Partition; {
		case p < 0 || p >= partitions:
			return fmt.Errorf("%w: piece %d is of partition %d of %d", ErrBadPieces, i, p, partitions)
		case next[p] < 0 || pc.Start != next[p]:
			return fmt.Errorf("%w: piece %d of partition %d starts at row %d", ErrBadPieces, i, p, pc.Start)
		case pc.End != api.ToEnd && pc.End <= pc.Start || pc.Offset < pc.Start || pc.End != api.ToEnd && pc.Offset > pc.End:
			return fmt.Errorf("%w: piece %d of partition %d: rows [%d,%d) at offset %d", ErrBadPieces, i, p, pc.Start, pc.End, pc.Offset)
		case pc.End == api.ToEnd:
			next[p] = -2
		default:
			next[p] = pc.End
		}
	}
	if p := slices.IndexFunc(next, func(n int) bool { return n != -2 }); p >= 0 {
		return fmt.Errorf("%w: partition %d does not run to its end", ErrBadPieces, p)
	}
	return nil
}

// MidPass is what a checkpoint begun inside a pass recorded as it began:
// the pieces of the pass in progress (none if no pass was), and the
// partitions' states and the clock, which its commit record names.
type MidPass struct {
	InPass
	States   map[int][]uint64 `json:"states,omitempty"`
	MaxClock int64            `json:"max_clock"`
}

// inside says whether the checkpoint begun as mp is one inside a pass:
// mp recorded pieces of it (nil at a boundary; none when nothing of the
// pass was granted yet, which commits as the boundary's).
func (mp *MidPass) inside() bool { return mp != nil && len(mp.Pieces) > 0 }

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
	if m.cfg.CheckpointDir == "" || !due {
		return
	}
	if m.st.Layout.Checkpoint != nil {
		if ck.MidPass != nil && !ck.Requested {
			// One begun inside the pass is still being written: the
			// next boundary takes this one.
			ck.Requested, m.dirty = true, true
		}
		return
	}
	ck.Requested = false
	m.beginCheckpoint(e, nil)
	m.note(api.EventCheckpoint, "", fmt.Sprintf("checkpoint %d after pass %d begins", ck.Seq, e+1)) // counted from 1, as people read it
}

// beginCheckpoint asks every ring server to write checkpoint Seq+1,
// after pass e; mp is what one begun inside a pass recorded (nil at a
// boundary).
func (m *Machine) beginCheckpoint(e int, mp *MidPass) {
	ck := &m.st.Checkpoint
	ck.Seq++
	var ids []string
	for _, s := range m.st.Layout.Servers {
		ids = append(ids, s.ID)
	}
	m.st.Layout.Checkpoint = &layout.Checkpoint{Dir: m.cfg.CheckpointDir, Seq: ck.Seq, Pass: e, Servers: ids}
	ck.Reported, ck.Started, ck.MidPass = map[string]bool{}, m.now, mp
	m.dirty = true
}

// checkpointNow begins a checkpoint inside the pass in progress, holding
// no work, or, while another is being written, asks for one to begin
// once it ends. why is for the timeline.
func (m *Machine) checkpointNow(why string) {
	ck := &m.st.Checkpoint
	if m.st.Layout.Checkpoint != nil {
		if !ck.Now {
			ck.Now, m.dirty = true, true
		}
		return
	}
	ck.Now = false
	e := m.st.DoneBefore - 1
	mp := &MidPass{MaxClock: m.st.MaxClock, States: m.partStates()}
	if w := m.st.Passes[m.st.DoneBefore]; w != nil {
		mp.InPass = InPass{Pass: m.st.DoneBefore, Pieces: m.savedPieces(w)}
	}
	m.beginCheckpoint(e, mp)
	where := fmt.Sprintf("inside pass %d", e+2)
	if !mp.inside() {
		where = fmt.Sprintf("after pass %d (nothing of the next granted yet)", e+1) // committed as a boundary's
	}
	m.note(api.EventCheckpoint, "", fmt.Sprintf("checkpoint %d %s begins: %s", ck.Seq, where, why))
	m.publish()
}

// savedPieces lists w's pieces as a checkpoint inside it keeps them. A
// partition whose pieces carry state (lda) and is not complete is kept
// as one piece from its first row, which a resume trains with the state
// of its last complete pass (the partition's): a piece's state is not
// written into the checkpoint, and the rows a worker trained after its
// grant changed the model under a state the resume would not have.
func (m *Machine) savedPieces(w *Pass) []SavedPiece {
	var out []SavedPiece
	for p, pcs := range w.Parts {
		stateful := len(m.st.PartStates[p]) > 0 || slices.ContainsFunc(pcs, func(pc Piece) bool { return len(pc.States) > 0 })
		if stateful && !w.complete(p) {
			out = append(out, SavedPiece{Partition: p, End: api.ToEnd})
			continue
		}
		for _, pc := range pcs {
			out = append(out, SavedPiece{Partition: p, Start: pc.Start, Offset: pc.Offset, End: pc.End, Done: pc.Done})
		}
	}
	return out
}

// checkpointOnLeave begins a checkpoint inside the pass when server asks
// to leave (its eviction notice, or a SIGTERM) while the job trains in a
// cluster without tiers, and the servers that stay are fewer than the
// chains' length: last, when nobody can take its slots, or when the
// slots keep one copy fewer than k once it goes, and a kill before the
// handoff ends (the notice's deadline), or another failure, loses them.
// A checkpoint at the next boundary may come after the machine is gone.
// It says, for a refusal, what keeps the slots: the checkpoint begun, or
// the next to begin.
func (m *Machine) checkpointOnLeave(server string, last bool) string {
	l := &m.st.Layout
	switch {
	case m.cfg.CheckpointDir == "":
		return " (nothing keeps them: the coordinator has no --checkpoint-dir)"
	case len(l.Tables) == 0 || l.JobDone || l.Resume != nil || l.Stage != 0:
		return " (a checkpoint keeps them: terrace checkpoint --wait)"
	}
	// One in progress may never commit (a server it names died: it is
	// abandoned only once the coordinator takes that server off), so
	// another is asked for after it rather than counted on.
	seq := m.st.Checkpoint.Seq + 1
	why := fmt.Sprintf("server %s is leaving, and fewer servers than the chains' %d stay", server, l.Replication)
	if last {
		why = fmt.Sprintf("server %s, the last on the ring, is leaving", server)
	}
	m.checkpointNow(why)
	return fmt.Sprintf(" (checkpoint %d, inside the pass, keeps them)", seq)
}

// abandonIfServerGone abandons the checkpoint in progress when a server
// it names left the ring (failed, restarted, or drained), or left last
// after the job with the model (leaveAtEnd), before it reported its
// part: nothing would commit it, and one at a boundary would hold the
// next pass for good; the slots that server headed are in no
// part (a drained server's went to servers that may have written first).
func (m *Machine) abandonIfServerGone() {
	ck := m.st.Layout.Checkpoint
	if ck == nil || m.committing {
		return
	}
	for _, id := range ck.Servers {
		if m.st.Checkpoint.Reported[id] || !m.leftLast(id) && slices.ContainsFunc(m.st.Layout.Servers, func(s ring.Server) bool { return s.ID == id }) {
			continue
		}
		why := fmt.Sprintf("server %s left the ring before writing its part", id)
		m.log.Warn("checkpoint abandoned", "seq", ck.Seq, "server", id, "err", why)
		m.note(api.EventCheckpoint, id, fmt.Sprintf("checkpoint %d abandoned: %s", ck.Seq, why))
		m.st.Checkpoint.Abandoned, m.st.Checkpoint.Why = ck.Seq, why
		// One inside a pass is taken again on the ring as it is now: its
		// servers hold the slots the one gone headed. Begun for a
		// server's leave that leaves fewer than k, it named that server,
		// which drained out before writing, and no checkpoint came of the
		// leave at all (a drill: notice, abandoned 7 ms later, the last
		// server killed a second after, nothing to resume from).
		if m.st.Checkpoint.MidPass != nil && len(m.st.Layout.Servers) > 0 && !m.st.Layout.JobDone {
			m.st.Checkpoint.Now = true
		}
		m.endCheckpoint()
		return
	}
}

// RequestCheckpoint asks for a checkpoint at the next pass boundary, or,
// with now, inside the pass in progress (checkpointNow), and at once
// either way when the job is done (its servers are quiescent and still
// hold the trained model). It replies the sequence number of the
// checkpoint that will serve the request: the next one to begin, since
// one already in progress began before the request.
func (m *Machine) RequestCheckpoint(id uint64, now bool) {
	l := &m.st.Layout
	switch {
	case m.cfg.CheckpointDir == "":
		m.fail(id, fmt.Errorf("%w: the coordinator has no checkpoint directory (--checkpoint-dir)", api.ErrBadRequest))
		return
	case l.Shutdown:
		m.fail(id, fmt.Errorf("%w: the job is done and its servers are shutting down", api.ErrBadRequest))
		return
	case now && l.Resume != nil:
		m.fail(id, fmt.Errorf("%w: the servers are still loading checkpoint %d", api.ErrBadRequest, l.Resume.Seq))
		return
	case now && len(l.Tables) == 0 && !l.JobDone:
		// Nothing to hold: it committed a checkpoint of no tables and no
		// job, the newest a resume would take; with no server on the
		// ring yet, it named none and waited for good.
		m.fail(id, fmt.Errorf("%w: job %d has no tables yet: ask once it trains, or without --now for one at its first pass boundary", api.ErrNothingToCheckpoint, l.Job+1))
		return
	case m.modelGone():
		// It named the server gone, and waited for good.
		newest := "none was taken"
		if c := m.st.Checkpoint.Committed; c != 0 {
			newest = fmt.Sprintf("the newest is %d", c)
		}
		m.fail(id, fmt.Errorf("%w: the last server left after job %d and the model went with it (%s)", api.ErrNothingToCheckpoint, l.Job+1, newest))
		return
	}
	if now && !l.JobDone {
		seq := m.st.Checkpoint.Seq + 1 // begun now, or next, after the one in progress
		m.checkpointNow("asked for")
		m.reply(Reply{ID: id, Seq: seq})
		return
	}
	if !m.st.Checkpoint.Requested {
		m.st.Checkpoint.Requested, m.dirty = true, true
	}
	m.reply(Reply{ID: id, Seq: m.st.Checkpoint.Seq + 1})
	m.checkpointIfDone()
}

// modelGone reports whether the last server left after the job with the
// model (leaveAtEnd): it stays on the ring, but no server holds anything
// a checkpoint could write.
func (m *Machine) modelGone() bool {
	l := &m.st.Layout
	return l.JobDone && len(l.Servers) == 1 && m.leftLast(l.Servers[0].ID)
}

// checkpointIfDone begins a requested checkpoint of a finished job: no
// pass boundary is left to begin it at.
func (m *Machine) checkpointIfDone() {
	if m.st.Layout.JobDone && !m.st.Layout.Shutdown && m.st.Checkpoint.Requested && m.st.DoneBefore > 0 && !m.modelGone() {
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
		m.endCheckpoint()
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
	c := &Commit{Dir: ck.Dir, Seq: ck.Seq, Pass: ck.Pass, Servers: slices.Clone(ck.Servers),
		Tables: slices.Clone(m.st.Layout.Tables), Partitions: m.st.Layout.Partitions, MaxClock: m.st.MaxClock,
		States: m.partStates(), Job: m.st.Job, JobNumber: m.st.Layout.Job + 1}
	if mp := m.st.Checkpoint.MidPass; mp != nil {
		// As recorded when it began: the states stay named until it
		// ends (referenced), though the partitions move on.
		c.MaxClock, c.States = mp.MaxClock, maps.Clone(mp.States)
		if mp.inside() {
			ip := mp.InPass
			ip.Pieces = slices.Clone(ip.Pieces)
			c.InPass = &ip
		}
	}
	m.out.Commit = c
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
		m.st.Checkpoint.CommittedInside = m.st.Checkpoint.MidPass.inside() // as its record says
		m.note(api.EventCheckpoint, "", fmt.Sprintf("checkpoint %d committed", seq))
	}
	m.endCheckpoint()
}

// endCheckpoint forgets the checkpoint in progress, committed or
// abandoned, drops the states only it named, and begins the one asked
// for meanwhile.
func (m *Machine) endCheckpoint() {
	ck := &m.st.Checkpoint
	mp := ck.MidPass
	m.st.Layout.Checkpoint = nil
	ck.Reported, ck.MidPass = nil, nil
	if mp != nil {
		for _, p := range slices.Sorted(maps.Keys(mp.States)) {
			m.unref(p, mp.States[p]...)
		}
	}
	m.publish()
	if ck.Now && m.st.Layout.JobDone {
		ck.Now, ck.Requested = false, true // a finished job's is taken at once
	}
	if ck.Now {
		m.checkpointNow("asked for while another was written")
		return
	}
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
		Committed: ck.Committed, CommittedPass: ck.CommittedPass, CommittedInside: ck.CommittedInside, Abandoned: ck.Abandoned, Why: ck.Why}
	if l := m.st.Layout.Checkpoint; l != nil {
		cs.InProgress, cs.Pass, cs.Servers, cs.Inside = true, l.Pass, len(l.Servers), ck.MidPass.inside()
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
	// InPass is the pass in progress when a checkpoint inside a pass
	// began (nil for one at a boundary): its pieces go back to the pool
	// at their offsets.
	InPass *InPass
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
	m.rewriteParts()
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
	if r.InPass != nil {
		m.resumePass(r.InPass, vers)
	}
	// The checkpoint resumed from is the last committed: the status said
	// none until this run committed one, after a resume from checkpoint 2.
	m.st.Checkpoint.Seq = r.Seq
	m.st.Checkpoint.Committed, m.st.Checkpoint.CommittedPass, m.st.Checkpoint.CommittedInside = r.Seq, r.Pass, r.InPass != nil
	if r.Next > r.Seq+1 {
		m.st.Checkpoint.Seq = r.Next - 1 // the next one begun is numbered Next
	}
	m.st.Layout.Resume = &layout.Checkpoint{Dir: r.Dir, Seq: r.Seq, Pass: r.Pass, Servers: slices.Clone(r.Servers)}
	m.st.Checkpoint.Restored = map[string]bool{}
	m.dirty = true
	return vers
}

// resumePass puts the pieces of a checkpoint's pass in progress back,
// free at their offsets; the first piece of a partition not complete
// starts from the partition's state, as a new pass's does (a partition
// with state was kept as one piece from its first row: savedPieces).
func (m *Machine) resumePass(ip *InPass, vers map[int][]uint64) {
	parts := make([][]Piece, m.st.Layout.Partitions)
	for _, sp := range ip.Pieces {
		parts[sp.Partition] = append(parts[sp.Partition], Piece{Start: sp.Start, End: sp.End, Offset: sp.Offset, Rank: -1, Done: sp.Done})
	}
	w := newPass(parts)
	for p, pcs := range w.Parts {
		if !w.done[p] {
			pcs[0].States = slices.Clone(vers[p])
		}
	}
	m.st.Passes[ip.Pass] = w
}

// Restored records that a server has loaded its slots of the checkpoint
// resumed from; once every ring server has, the layout may become Ready.
func (m *Machine) Restored(id uint64, c api.Checkpointed) {
	r := m.st.Layout.Resume
	if r == nil || r.Seq != c.Seq || r.Rewind != c.Rewind {
		// Not the load in progress: one started over since (a server
		// left the ring during it, reloadRewind) counts only its own.
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
	if l.Resume.Rewind > 0 {
		// Gone back on a live cluster: it formed long ago, though a
		// worker may have died since (publish counts them).
		l.Ready = true
		m.note(api.EventCheckpoint, "", fmt.Sprintf("back at checkpoint %d: every server loaded it again; work is granted again", l.Resume.Seq))
		m.log.Warn("back at the checkpoint: training goes on from it", "seq", l.Resume.Seq)
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
