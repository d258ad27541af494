package coord

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/internal/placement/tier"
)

// Eval is the evaluation of the model after one pass, handed to one
// worker at a time (docs/design/jobs.md).
type Eval struct {
	// Rank holds the hand-out; -1 when it is due (never handed out, or
	// its holder died, drained, or was handed it by a coordinator that
	// has since failed over).
	Rank   int             `json:"rank"`
	Result *api.PassResult `json:"result,omitempty"`
	Late   bool            `json:"late,omitempty"`
}

// SubmitJob sets the cluster's job, or checks that j is the job already
// set; the reply's Job is the job in force. A different job is refused
// with api.ErrJobConflict while one runs: jobs do not change under
// running workers. Once the job is done, j starts the next job on a
// cluster that stays up (nextJob).
func (m *Machine) SubmitJob(id uint64, j api.Job) {
	if j.App == "" {
		m.fail(id, fmt.Errorf("%w: a job needs an app", api.ErrBadRequest))
		return
	}
	switch l := &m.st.Layout; {
	case l.JobDone && l.Shutdown:
		m.reply(Reply{ID: id, Job: m.st.Job, Err: fmt.Errorf("%w: the job is done and the cluster ends with it (its coordinator runs with --exit-when-done)", api.ErrJobConflict)})
		return
	case l.JobDone:
		m.nextJob(j)
	case m.st.ResumedJob && len(m.st.Workers) == 0 && !sameModel(m.st.Job, &j):
		m.reply(Reply{ID: id, Job: m.st.Job, Err: fmt.Errorf("%w: the checkpoint resumed from is of %s, not %s: this job cannot go on from its model",
			api.ErrJobConflict, modelOf(m.st.Job), modelOf(&j))})
		return
	case m.st.ResumedJob && len(m.st.Workers) == 0 && j.Passes > 0 && j.Passes < m.st.DoneBefore:
		// It trained nothing, evaluated nothing and wrote no --model: the
		// passes it asks for are behind the model resumed.
		m.reply(Reply{ID: id, Job: m.st.Job, Err: fmt.Errorf("%w: the checkpoint resumed from holds %d passes of %s: a job of %d passes cannot go on from it (ask for %d or more)",
			api.ErrJobConflict, m.st.DoneBefore, modelOf(m.st.Job), j.Passes, m.st.DoneBefore)})
		return
	case m.st.Job == nil, m.st.ResumedJob && len(m.st.Workers) == 0:
		m.st.Job, m.st.ResumedJob = &j, false
		m.dirty = true
	case !reflect.DeepEqual(*m.st.Job, j) && m.unstarted():
		m.note(api.EventJob, "", fmt.Sprintf("job %d replaced: it trained nothing and no worker of it is alive", l.Job+1))
		m.nextJob(j)
	}
	if !reflect.DeepEqual(*m.st.Job, j) {
		m.reply(Reply{ID: id, Job: m.st.Job, Err: fmt.Errorf("%w: job %d runs (submit yours once it is done): %s", api.ErrJobConflict, m.st.Layout.Job+1, diffJobs(m.st.Job, &j))})
		return
	}
	m.reply(Reply{ID: id, Job: m.st.Job})
}

// unstarted reports whether the job in force has trained nothing and no
// worker of it is alive: every worker that joined has finished (left, or
// failed: a worker whose data has a malformed line fails after its join),
// no pass is done and no piece has a trained row. A different job
// submitted then replaces it (nextJob): nothing would be lost, and such a
// job can never end (nobody runs it), so it held the cluster, every next
// submit refused, until the coordinator restarted.
func (m *Machine) unstarted() bool {
	if m.st.DoneBefore > 0 {
		return false
	}
	for _, r := range m.st.Workers {
		if !m.finished(r) {
			return false
		}
	}
	for _, p := range m.st.Passes {
		for _, pcs := range p.Parts {
			for _, pc := range pcs {
				if pc.Done || pc.Offset > pc.Start {
					return false
				}
			}
		}
	}
	return true
}

// sameModel reports whether job b trains the model of job a, so that b
// may go on from a's checkpoint: the same app on the same data. Passes,
// and the hyper-parameters that tables do not check, may change (train
// --resume with more passes). A different app had made tables of other
// names: the checkpoint's were restored, unused, and b trained from
// scratch after the checkpoint's passes, as if it had resumed.
func sameModel(a, b *api.Job) bool {
	return a.App == b.App && a.Train == b.Train && a.Hidden == b.Hidden && a.Factors == b.Factors && a.Topics == b.Topics
}

// modelOf names a job's model for sameModel's refusal: its app, the
// widths that shape its tables, and its data.
func modelOf(j *api.Job) string {
	s := "app " + j.App
	for _, w := range []struct {
		name string
		v    int
	}{{"hidden", j.Hidden}, {"factors", j.Factors}, {"topics", j.Topics}} {
		if w.v != 0 {
			s += fmt.Sprintf(" (--%s %d)", w.name, w.v)
		}
	}
	return s + " on " + j.Train
}

// diffJobs names the first fields where b differs from the job a in force.
func diffJobs(a, b *api.Job) string {
	va, vb := reflect.ValueOf(*a), reflect.ValueOf(*b)
	var d []string
	for i := range va.NumField() {
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			d = append(d, fmt.Sprintf("%s %v, not %v", va.Type().Field(i).Tag.Get("yaml"), va.Field(i).Interface(), vb.Field(i).Interface()))
		}
	}
	return "the job in force has " + fmt.Sprint(d)
}

// ClaimEval hands rank the evaluation of pass c.Pass if no live worker
// holds it, and every earlier one that is due again (late).
func (m *Machine) ClaimEval(id uint64, c api.EvalClaim) {
	if err := m.behind(c.Rank, c.Pass); err != nil {
		m.fail(id, err)
		return
	}
	var got []int
	for _, p := range m.evalPasses() {
		e := m.st.Evals[p]
		if p < c.Pass && e.due(m) {
			e.Rank, e.Late = c.Rank, true
			got = append(got, p)
			m.dirty = true
		}
	}
	e := m.st.Evals[c.Pass]
	if e == nil {
		e = &Eval{Rank: -1}
		m.st.Evals[c.Pass] = e
	}
	if e.due(m) {
		e.Rank = c.Rank
		got = append(got, c.Pass)
		m.dirty = true
	}
	var pending []int
	for _, p := range m.evalPasses() {
		if e := m.st.Evals[p]; p <= c.Pass && e.Result == nil && e.Rank != c.Rank {
			pending = append(pending, p)
		}
	}
	m.reply(Reply{ID: id, Evals: got, Pending: pending})
}

// due reports whether the evaluation waits for a worker to take it.
func (e *Eval) due(m *Machine) bool {
	return e.Result == nil && (e.Rank < 0 || m.finished(e.Rank))
}

// EvalResult records an evaluation's result.
func (m *Machine) EvalResult(id uint64, r api.PassResult) {
	e := m.st.Evals[r.Pass]
	if m.st.Behind[r.Rank] && (e == nil || r.Pass > m.st.DoneBefore) {
		// Evaluated before the cluster went back.
		m.fail(id, m.behind(r.Rank, r.Pass))
		return
	}
	if e == nil {
		m.fail(id, fmt.Errorf("%w: no evaluation of pass %d was handed out", api.ErrBadRequest, r.Pass))
		return
	}
	if e.Result == nil {
		r.Late = e.Late
		e.Result = &r
		m.dirty = true
		if a := r.Examples; a != nil && (a.Repeated > 0 || a.Skipped > 0) {
			m.note(api.EventAccount, m.workerName(r.Rank), fmt.Sprintf("pass %d: %d trainings of %d rows, %d repeated, %d skipped", r.Pass, a.Trained, a.Rows, a.Repeated, a.Skipped))
		}
	}
	m.reply(Reply{ID: id})
}

// examplesAccounted sums the examples accounts of the passes evaluated.
func (m *Machine) examplesAccounted() (passes int, repeated, skipped int64) {
	for _, e := range m.st.Evals {
		if e.Result != nil && e.Result.Examples != nil {
			passes++
			repeated += e.Result.Examples.Repeated
			skipped += e.Result.Examples.Skipped
		}
	}
	return passes, repeated, skipped
}

func (m *Machine) evalPasses() []int {
	return slices.Sorted(maps.Keys(m.st.Evals))
}

// dueAgain makes every evaluation handed out and not yet reported due
// again: a new leader cannot know whether its holder still works on it.
func (m *Machine) dueAgain() {
	for _, e := range m.st.Evals {
		if e.Result == nil {
			e.Rank = -1
		}
	}
}

// endJob marks the job done in the layout, which tells servers (and, with
// exit, that they exit).
func (m *Machine) endJob() {
	l := &m.st.Layout
	if l.JobDone {
		return
	}
	l.JobDone, l.Shutdown = true, m.cfg.ExitWhenDone
	if l.Shutdown {
		m.note(api.EventEnd, "", fmt.Sprintf("job %d done: the cluster ends with it (--exit-when-done)", l.Job+1))
	} else {
		m.note(api.EventJob, "", fmt.Sprintf("job %d done: the cluster stays up for the next", l.Job+1))
	}
	m.publish()
}

// JobStatus returns the job, its progress and its results.
func (m *Machine) JobStatus() api.JobStatus {
	st := api.JobStatus{Job: m.st.Job, Number: m.st.Layout.Job + 1, PassesDone: m.st.DoneBefore, Done: m.st.Layout.JobDone,
		Workers: maps.Clone(m.st.Workers), Results: []api.PassResult{}}
	if st.Job != nil {
		j := *st.Job
		st.Job = &j
	}
	for _, p := range m.evalPasses() {
		if r := m.st.Evals[p].Result; r != nil {
			st.Results = append(st.Results, *r)
		}
	}
	for _, s := range m.st.Layout.Servers {
		st.Servers = append(st.Servers, s.ID)
	}
	return st
}

// leaveAtEnd answers a server that asks to leave after the job. A
// cluster that ends with its job (Shutdown) moves nothing: its servers
// exit by themselves. A cluster that stays up keeps the finished job's
// model for export or a checkpoint: a server leaving it drains like one
// leaving mid-job (false: LeaveServer goes on), its slots shipped to the
// servers that stay. Only the last server on the ring, which has nobody
// to ship to, leaves at once (Layout.LastAfterJob), and the model goes with it:
// said in the log and the timeline, not silently.
//
// With tiers in stage 2 or 3 (or switching) the ActivePS hold the round
// not yet streamed to the BackupPS, which stay: the notice still drains,
// or switches to stage 1 (noticeTiered), so that the BackupPS end with
// the whole result.
func (m *Machine) leaveAtEnd(id uint64, server string) bool {
	l := &m.st.Layout
	if !l.JobDone {
		return false
	}
	if l.Shutdown {
		m.endedWithCluster(server)
		m.replyLayout(id)
		return true
	}
	if m.cfg.Stage != 0 && (l.CurrentStage() != tier.Stage1 || l.Switch != nil) {
		return false
	}
	if !l.LastAfterJob(server) {
		return false
	}
	if m.st.LastLeft != server {
		m.st.LastLeft, m.dirty = server, true
		lost := fmt.Sprintf("the last server left after job %d: the job's model went with it (export it, or take a checkpoint, before stopping the last server)", l.Job+1)
		if ck := m.st.Checkpoint; ck.Committed != 0 {
			lost += fmt.Sprintf("; the newest checkpoint is %d", ck.Committed)
		}
		m.log.Warn(lost, "server", server)
		m.note(api.EventLeft, server, lost)
		m.abandonIfServerGone()
	}
	m.replyLayout(id)
	return true
}

// diedAfterJob takes the last server on the ring, found dead after the
// job, as gone with the finished job's model, as leaveAtEnd takes one
// that leaves then: said in the log and the timeline, shown dead in the
// status, and replaced by the next server to join (dropLeftRing).
// Nothing was said of it, the status showed it serving every slot for
// good (also one that served out its notice as the job ended and could
// not tell the coordinator), and the next job's joiners waited for a copy
// from it. One only stopped that answers again is back (ServerAnswers).
// It reports whether server was that server.
func (m *Machine) diedAfterJob(server, why string) bool {
	l := &m.st.Layout
	if !l.JobDone || l.Shutdown || len(l.Servers) != 1 || l.Servers[0].ID != server || len(l.Leaving) > 0 || m.st.LastLeft == server ||
		m.cfg.Stage != 0 && (l.CurrentStage() != tier.Stage1 || l.Switch != nil) {
		return false
	}
	m.st.LastLeft, m.dirty = server, true
	lost := fmt.Sprintf("the last server on the ring %s after job %d: taken as gone with the job's model (export it, or take a checkpoint, while a server holds it); a server that joins takes its place for the next job, and it is back if it answers again", why, l.Job+1)
	if ck := m.st.Checkpoint; ck.Committed != 0 {
		lost += fmt.Sprintf("; the newest checkpoint is %d", ck.Committed)
	}
	m.log.Error(lost, "server", server)
	m.note(api.EventFailed, server, lost)
	m.abandonIfServerGone()
	return true
}

// leftLast reports whether server is the last server, which left after a
// job with the model (leaveAtEnd) and stays on the ring until others take
// its place (dropLeftRing): its exit is no failure.
func (m *Machine) leftLast(server string) bool {
	return server != "" && server == m.st.LastLeft && slices.ContainsFunc(m.st.Layout.Servers, func(s ring.Server) bool { return s.ID == server })
}

// endedWithCluster reports whether losing server is the cluster's planned
// end: the job is done and the cluster ends with it (--exit-when-done),
// so its servers exit by themselves. Nothing moves then (copying slots
// again for a cluster that ends is waste, and the timeline and its plot
// showed every server failed), and the timeline says each left.
func (m *Machine) endedWithCluster(server string) bool {
	l := &m.st.Layout
	if !l.JobDone || !l.Shutdown {
		return false
	}
	if m.st.Gone[server] == "" && slices.ContainsFunc(l.AllServers(), func(s ring.Server) bool { return s.ID == server }) {
		m.log.Info("server exited with the cluster", "server", server)
		m.note(api.EventLeft, server, "exited with the cluster: the job is done (--exit-when-done)")
	}
	return true
}

// JobStatus returns the job, its progress and its results.
func (c *Coordinator) JobStatus() api.JobStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m.JobStatus()
}

func (c *Coordinator) jobHandlers(mux *http.ServeMux) {
	handle(mux, api.RouteJob, func(ctx context.Context, j api.Job) (any, error) {
		r, err := c.call(ctx, func(m *Machine, id uint64) { m.SubmitJob(id, j) })
		return r.Job, err
	})
	mux.HandleFunc(api.RouteJobStatus, func(w http.ResponseWriter, r *http.Request) { reply(w, c.JobStatus(), nil) })
	handle(mux, api.RouteEvalClaim, func(ctx context.Context, ec api.EvalClaim) (any, error) {
		r, err := c.call(ctx, func(m *Machine, id uint64) { m.ClaimEval(id, ec) })
		return api.EvalGrant{Passes: r.Evals, Pending: r.Pending}, err
	})
	handle(mux, api.RouteEvalResult, func(ctx context.Context, pr api.PassResult) (any, error) {
		_, err := c.call(ctx, func(m *Machine, id uint64) { m.EvalResult(id, pr) })
		return struct{}{}, err
	})
}
