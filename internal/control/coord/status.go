package coord

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/copies"
	"github.com/terrace-ml/terrace/internal/placement/ring"
)

// statusSlots is how many slots Status samples to give each server its
// share of the ring.
const statusSlots = 4096

// Status describes the cluster as the machine sees it: the job's
// progress and every node, in role and ID order. Rate and ETA are the
// driver's (they need samples over time).
func (m *Machine) Status() api.Status {
	l := &m.st.Layout
	st := api.Status{Time: m.now, Epoch: l.Epoch, Epochs: m.st.Epochs, Version: l.Version, Ready: l.Ready}
	st.Job = api.Progress{Pass: m.st.DoneBefore, Partitions: l.Partitions, Reported: len(m.st.Reports), Workers: len(m.st.Workers),
		Examples: m.st.Trained, ExamplesFrom: m.st.TrainedFrom * l.Partitions}
	if w := m.st.Passes[m.st.DoneBefore]; w != nil {
		st.Job.Done = l.Partitions - w.left()
	}
	st.Job.Accounted, st.Job.Repeated, st.Job.Skipped = m.examplesAccounted()
	st.Stage = int(l.CurrentStage())
	st.Checkpoint = m.checkpointStatus()
	st.UpdatesLost, st.UpdatesAtRisk, st.LedgersUnreported = m.st.Loss.UpdatesLost, m.st.Loss.UpdatesLostBound, m.st.Loss.Unreported
	st.CopiesLost, st.SlotLosses = m.st.CopiesLost, slices.Clone(m.st.SlotLosses)
	st.Rewinds, st.LastRewind = m.st.Rewinds, m.st.LastRewind
	if risk, err := m.copies.AtRisk(); err == nil {
		st.UnderReplicated = copies.Share(risk)
	}
	if m.st.Job != nil {
		js := m.JobStatus()
		st.Definition = &js
	}
	share := m.ringShare()
	for _, s := range l.Servers {
		state, holds := "serving", fmt.Sprintf("%.0f%% of slots (primary)", 100*share[s.ID])
		switch {
		case slices.Contains(l.Leaving, s.ID) && m.gathered(s):
			state = "to standby"
		case slices.Contains(l.Leaving, s.ID):
			state = "leaving"
		case m.leftLast(s.ID) && m.st.Gone[s.ID] == api.EventFailed:
			state, holds = goneState(api.EventFailed), "nothing: its slots went down with it after the job"
		case m.leftLast(s.ID):
			state, holds = goneState(api.EventLeft), "nothing: it left with its slots"
		case m.serverDown(s):
			// It showed "serving" once dead, kept on the ring for want
			// of another server: a whole cluster SIGKILLed and started
			// again on its --etcd-dir, the last server past its drain's
			// deadline.
			state, holds = "down", "every slot, and no answer: the job waits for it, or for a server to join in its place"
		}
		st.Nodes = append(st.Nodes, api.NodeStatus{Role: api.RoleServer, ID: s.ID, Addr: s.Addr, State: state, Holds: holds})
	}
	for _, s := range l.Joining {
		st.Nodes = append(st.Nodes, api.NodeStatus{Role: api.RoleServer, ID: s.ID, Addr: s.Addr, State: "joining"})
	}
	for _, s := range l.Backup {
		st.Nodes = append(st.Nodes, api.NodeStatus{Role: api.RoleServer, ID: s.ID, Addr: s.Addr, State: "serving",
			Holds: "backup copies, streamed from the ActivePS"})
	}
	for _, s := range l.Standby {
		st.Nodes = append(st.Nodes, api.NodeStatus{Role: api.RoleServer, ID: s.ID, Addr: s.Addr, State: "standby"})
	}
	for id, how := range m.st.Gone {
		if slices.ContainsFunc(st.Nodes, func(n api.NodeStatus) bool { return n.ID == id }) {
			continue
		}
		if _, worker := m.st.Workers[id]; worker {
			continue
		}
		st.Nodes = append(st.Nodes, api.NodeStatus{Role: api.RoleServer, ID: id, State: goneState(how)})
	}
	held := m.heldPieces()
	for id, r := range m.st.Workers {
		n := api.NodeStatus{Role: api.RoleWorker, ID: id, Rank: r, State: "idle", Holds: strings.Join(held[r], " ")}
		_, reported := m.st.Reports[r]
		switch {
		case reported:
			n.State = "finished"
		case m.finished(r):
			n.State = goneState(m.st.Gone[id])
		case len(held[r]) > 0:
			n.State = "training"
		}
		st.Nodes = append(st.Nodes, n)
	}
	for i := range st.Nodes {
		st.Nodes[i].Metrics = m.st.Metrics[st.Nodes[i].Role+"/"+st.Nodes[i].ID]
	}
	m.describeTiers(&st)
	slices.SortFunc(st.Nodes, func(a, b api.NodeStatus) int {
		return cmp.Or(cmp.Compare(a.Role, b.Role), cmp.Compare(a.ID, b.ID))
	})
	return st
}

func goneState(how string) string {
	if how == api.EventLeft {
		return "left"
	}
	return "dead"
}

// ringShare returns each ring server's share of the slots it heads.
func (m *Machine) ringShare() map[string]float64 {
	out := map[string]float64{}
	r, err := ring.New(m.st.Layout.Epoch, m.st.Layout.Servers, m.st.Layout.VNodes)
	if err != nil || len(r.Servers) == 0 {
		return out
	}
	for s := range uint64(statusSlots) {
		out[r.Servers[r.SlotOwner(s)].ID] += 1.0 / statusSlots
	}
	return out
}

// heldPieces lists, by rank, the pieces each worker holds, as
// "pass/partition[start,end)@offset".
func (m *Machine) heldPieces() map[int][]string {
	out := map[int][]string{}
	for _, e := range m.passNumbers() {
		w := m.st.Passes[e]
		for _, rank := range slices.Sorted(maps.Keys(w.holder)) {
			if p, i := m.heldBy(w, rank); p >= 0 {
				pc := &w.Parts[p][i]
				out[rank] = append(out[rank], fmt.Sprintf("%d/%d%s@%d", e, p, pc, pc.Offset))
			}
		}
	}
	return out
}

// rateWindow is how far back the training rate looks.
const rateWindow = time.Minute

// sampleLocked records how many rows were trained at now, once a second
// at most, for the rate; c.mu is held.
func (c *Coordinator) sampleLocked(now time.Time) {
	c.rate.add(now, c.m.trained, c.m.st.Layout.JobDone)
	c.meter.record(c.statusLocked(now))
}

// rateSamples are the rows trained at moments a second or more apart,
// over the last rateWindow, for the training rate. Once the job is done
// they stop: a finished job's status shows the rate of its last minute of
// training. They went on, and the rate decayed to 0 in the minute after
// the job (lr on a9a: 140,804, 128,319, 116,289 rows/s 5 s apart).
type rateSamples struct {
	s []sample
	// done: the job was done at the last add; s ends with the first
	// sample taken after it was.
	done bool
}

// add records trained at now, unless the job was already done at the
// previous add; the first add of a job after a done one starts afresh.
func (r *rateSamples) add(now time.Time, trained int64, done bool) {
	switch {
	case done && r.done:
		return
	case done:
		// The last rows trained are in this sample, however soon after
		// the previous one it comes.
		r.s, r.done = append(r.s, sample{now, trained}), true
		return
	case r.done:
		r.s, r.done = nil, false
	}
	if n := len(r.s); n > 0 && now.Sub(r.s[n-1].at) < time.Second {
		return
	}
	r.s = append(r.s, sample{now, trained})
	for len(r.s) > 2 && now.Sub(r.s[0].at) > rateWindow {
		r.s = r.s[1:]
	}
}

// rate is the training rate of the samples, rows a second; a done job's
// ends at the first sample that counts its last row (the workers' final
// evaluation and reports after it are not training).
func (r *rateSamples) rate() float64 {
	s := r.s
	for r.done && len(s) > 1 && s[len(s)-2].trained == s[len(s)-1].trained {
		s = s[:len(s)-1]
	}
	return trainingRate(s)
}

// jobRate is the job's training rate from its start: its rows over the
// time from its first grant to its last rows recorded, both saved; false
// if it trained nothing. A done job's rate is this: the samples, a second
// apart, put a short job's rows in too few seconds (5 lr passes on a9a in
// under 2 s showed 162,805 rows/s, every row in one second's samples), and
// lived in the leader's memory (a new leader showed 0). So is a running
// job's until the leader has two samples: a new leader showed 0 rows/s
// for its first seconds.
func (m *Machine) jobRate() (float64, bool) {
	st := &m.st
	if st.TrainBegan.IsZero() || !st.TrainedAt.After(st.TrainBegan) {
		return 0, false
	}
	return float64(st.Trained) / st.TrainedAt.Sub(st.TrainBegan).Seconds(), true
}

// trainingRate is the rows a second of samples, from the last sample
// before training began in them: the wait for a job's workers (the idle
// minute before a cluster's next job) is not the job's. A second job's
// rate, 4 s in, was 12,480 rows/s of about 140,000, and its ETA 1m31s for
// the 6 s it took.
func trainingRate(samples []sample) float64 {
	a := 0
	for a+1 < len(samples) && samples[a+1].trained == samples[a].trained {
		a++
	}
	if a >= len(samples)-1 {
		return 0
	}
	first, last := samples[a], samples[len(samples)-1]
	if dt := last.at.Sub(first.at).Seconds(); dt > 0 {
		return float64(last.trained-first.trained) / dt
	}
	return 0
}

// Status returns the cluster's status, with the training rate over the
// last minute and the ETA of the pass in progress at that rate.
func (c *Coordinator) Status() api.Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.statusLocked(time.Now())
}

// statusLocked is Status at now, with the machines' cost advanced to
// now; c.mu is held.
func (c *Coordinator) statusLocked(now time.Time) api.Status {
	c.m.SetNow(now)
	st := c.m.Status()
	st.Job.Rate = c.rate.rate()
	if r, ok := c.m.jobRate(); ok && (c.m.st.Layout.JobDone || len(c.rate.s) < 2) {
		st.Job.Rate = r
	}
	st.Job.ETA, st.Job.JobETA = statusETAs(st)
	st.Events = c.events.last()
	c.meter.advance(now, st.Machines)
	if c.meter.priced() {
		dollars, perHour := c.meter.dollars, c.meter.perHour
		st.Dollars, st.DollarsPerHour = &dollars, &perHour
	}
	return st
}

// statusETAs is st's pass and job ETAs: none once the job is done, or
// while nothing can train it (no worker alive, or the last server down).
// A finished job's status showed a pass ETA (lr on a9a: "pass 60/60 ...
// pass eta 700ms"), the time to train a whole pass again at the last
// minute's rate; with every worker drained, the job's ETA grew with the
// decaying rate ("job eta 21s", then 24s, 38s, 51s 5 s apart) for a job
// that trains nothing until a worker joins.
func statusETAs(st api.Status) (pass, job time.Duration) {
	d := st.Definition
	if d != nil && d.Done || !slices.ContainsFunc(st.Nodes, workerAlive) || slices.ContainsFunc(st.Nodes, serverDown) {
		return 0, 0
	}
	passes := 0
	if d != nil && d.Job != nil {
		passes = d.Job.Passes
	}
	return etas(st.Job, passes)
}

// serverDown says whether n is a server found dead and kept on the ring.
func serverDown(n api.NodeStatus) bool { return n.Role == api.RoleServer && n.State == "down" }

// workerAlive says whether n is a worker that may train: joined, and not
// gone or finished.
func workerAlive(n api.NodeStatus) bool {
	return n.Role == api.RoleWorker && (n.State == "idle" || n.State == "training")
}

// etas is the time the pass in progress and the job's passes (passes in
// all, 0 if unknown) would take to finish at p's rate, each 0 when
// unknown. The rows a partition holds are estimated from what was
// trained so far, in this pass and before.
func etas(p api.Progress, passes int) (pass, job time.Duration) {
	left := p.Partitions - p.Done
	// At a pass boundary (no partition of the pass done yet) the passes
	// before still tell the rows a partition holds: the ETAs were unknown
	// there, and lr's passes of a tenth of a second showed "-" mostly.
	if p.Rate <= 0 || left <= 0 || p.Examples <= 0 {
		return 0, 0
	}
	counted := p.Pass*p.Partitions + p.Done - p.ExamplesFrom
	if counted <= 0 {
		return 0, 0
	}
	perPart := float64(p.Examples) / float64(counted)
	at := func(parts int) time.Duration {
		return time.Duration(float64(parts) * perPart / p.Rate * float64(time.Second))
	}
	if passes > p.Pass {
		job = at(left + (passes-p.Pass-1)*p.Partitions)
	}
	return at(left), job
}
