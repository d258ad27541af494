package coord

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/table"
)

// jobRig drives a Machine as the driver does: each step's Ready is saved
// (kept) and advanced, and the reply of the step's request returned.
type jobRig struct {
	t      *testing.T
	m      *Machine
	id     uint64
	saved  Saved
	events []api.Event // every Ready's
}

func newJobRig(t *testing.T, cfg Config) *jobRig {
	r := &jobRig{t: t, m: NewMachine(cfg, t0)}
	for i := range max(cfg.Servers, 2) {
		r.step(func(m *Machine, rid uint64) {
			m.Join(rid, api.Join{Role: api.RoleServer, ID: fmt.Sprintf("s%d", i), Addr: fmt.Sprintf("127.0.0.1:%d", i+1)})
		})
	}
	for _, id := range []string{"w0", "w1"} {
		r.step(func(m *Machine, rid uint64) { m.Join(rid, api.Join{Role: api.RoleWorker, ID: id}) })
	}
	return r
}

func (r *jobRig) step(f func(m *Machine, id uint64)) Reply {
	r.t.Helper()
	r.id++
	f(r.m, r.id)
	var got *Reply
	for {
		rd, ok := r.m.Ready()
		if !ok {
			break
		}
		if rd.Save != nil {
			r.saved.Apply(rd.Save)
		}
		r.events = append(r.events, rd.Events...)
		for i := range rd.Replies {
			if rd.Replies[i].ID == r.id {
				got = &rd.Replies[i]
			}
		}
		if err := r.m.Advance(0); err != nil {
			r.t.Fatal(err)
		}
	}
	if got == nil {
		r.t.Fatalf("request %d got no reply", r.id)
	}
	return *got
}

func (r *jobRig) claim(rank, pass int) []int {
	r.t.Helper()
	rep := r.step(func(m *Machine, id uint64) { m.ClaimEval(id, api.EvalClaim{Rank: rank, Pass: pass}) })
	if rep.Err != nil {
		r.t.Fatal(rep.Err)
	}
	return rep.Evals
}

// TestPendingEvals: a claim lists the evaluations other live workers
// hold, so that a worker at the job's end can wait for them, and take
// one whose holder dies.
func TestPendingEvals(t *testing.T) {
	r := newJobRig(t, Config{Servers: 2, Workers: 2, Partitions: 2, Replication: 2})
	r.claim(0, 1)
	rep := r.step(func(m *Machine, id uint64) { m.ClaimEval(id, api.EvalClaim{Rank: 1, Pass: 1}) })
	if len(rep.Evals) != 0 || !slices.Equal(rep.Pending, []int{1}) {
		t.Fatalf("rank 1 after rank 0 took pass 1: evals %v pending %v", rep.Evals, rep.Pending)
	}
	r.step(func(m *Machine, id uint64) { m.Leave(id, 0) })
	rep = r.step(func(m *Machine, id uint64) { m.ClaimEval(id, api.EvalClaim{Rank: 1, Pass: 1}) })
	if !slices.Equal(rep.Evals, []int{1}) || len(rep.Pending) != 0 {
		t.Fatalf("after rank 0 left: evals %v pending %v, want pass 1 handed to rank 1", rep.Evals, rep.Pending)
	}
}

func TestSubmitJobRefusesAnother(t *testing.T) {
	r := newJobRig(t, Config{Servers: 2, Workers: 2, Partitions: 2, Replication: 2})
	j := api.Job{App: "lr", Train: "a9a", Passes: 5, Consistency: "ssp:2"}
	if rep := r.step(func(m *Machine, id uint64) { m.SubmitJob(id, j) }); rep.Err != nil || *rep.Job != j {
		t.Fatalf("first submission: %v, %+v", rep.Err, rep.Job)
	}
	if rep := r.step(func(m *Machine, id uint64) { m.SubmitJob(id, j) }); rep.Err != nil {
		t.Fatalf("the same job again: %v", rep.Err)
	}
	other := j
	other.Passes = 10
	rep := r.step(func(m *Machine, id uint64) { m.SubmitJob(id, other) })
	if !errors.Is(rep.Err, api.ErrJobConflict) || rep.Job.Passes != 5 {
		t.Fatalf("a different job: %v, %+v; want ErrJobConflict and the 5-pass job in force", rep.Err, rep.Job)
	}
	// The job is in the saved state: a new leader has it.
	m, err := RestoreMachine(r.m.cfg, r.saved, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	if st := m.JobStatus(); st.Job == nil || *st.Job != j {
		t.Fatalf("restored job %+v, want %+v", st.Job, j)
	}
}

// TestEvalsFollowLiveWorkers is the drain of rank 0 in issue 13: the
// evaluation of a pass goes to the first live worker that asks, one
// handed to a worker that then leaves is due again (late) for the next
// that asks, and a new leader makes every unfinished hand-out due.
func TestEvalsFollowLiveWorkers(t *testing.T) {
	r := newJobRig(t, Config{Servers: 2, Workers: 2, Partitions: 2, Replication: 2})
	if got := r.claim(1, 1); !slices.Equal(got, []int{1}) {
		t.Fatalf("rank 1 asks first for pass 1: got %v", got)
	}
	if got := r.claim(0, 1); len(got) != 0 {
		t.Fatalf("rank 0 asks second for pass 1: got %v, want nothing", got)
	}
	r.step(func(m *Machine, id uint64) {
		m.EvalResult(id, api.PassResult{Pass: 1, Rank: 1, Metrics: map[string]float64{"test_accuracy": 0.8}})
	})
	// Rank 0 takes pass 2, then drains before it reports.
	if got := r.claim(0, 2); !slices.Equal(got, []int{2}) {
		t.Fatalf("pass 2: got %v", got)
	}
	r.step(func(m *Machine, id uint64) { m.Leave(id, 0) })
	if got := r.claim(1, 3); !slices.Equal(got, []int{2, 3}) {
		t.Fatalf("after rank 0 left, rank 1 asks for pass 3: got %v, want the orphaned pass 2 and 3", got)
	}
	r.step(func(m *Machine, id uint64) {
		m.EvalResult(id, api.PassResult{Pass: 2, Rank: 1, Metrics: map[string]float64{"test_accuracy": 0.81}})
	})
	// A failover while pass 3 is handed out: the new leader hands it again.
	m, err := RestoreMachine(r.m.cfg, r.saved, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	r.m = m
	if got := r.claim(1, 3); !slices.Equal(got, []int{3}) {
		t.Fatalf("after a failover: got %v, want pass 3 due again", got)
	}
	st := r.m.JobStatus()
	if len(st.Results) != 2 || st.Results[1].Pass != 2 || !st.Results[1].Late {
		t.Fatalf("results %+v: want passes 1 and 2, 2 late", st.Results)
	}
}

// TestJobEnd: once every worker reported, the layout says the job is done
// and, with ExitWhenDone, that the cluster ends, which the timeline says.
// The servers then exit by themselves: asked to leave, or found gone by
// the pings, nothing moves (same ring, same epoch: the slots were copied
// again, the epoch climbing 6 to 192 by hand) and each is recorded as
// left, not failed.
func TestJobEnd(t *testing.T) {
	r := newJobRig(t, Config{Servers: 2, Workers: 2, Partitions: 2, Replication: 2, ExitWhenDone: true})
	for rank := range 2 {
		if rep := r.step(func(m *Machine, id uint64) { m.Report(id, rank, []byte(`{}`)) }); rep.Err != nil {
			t.Fatal(rep.Err)
		}
	}
	l := r.m.published
	if !l.JobDone || !l.Shutdown {
		t.Fatalf("published layout after every report: job_done %v shutdown %v", l.JobDone, l.Shutdown)
	}
	if !slices.ContainsFunc(r.events, func(e api.Event) bool { return e.Kind == api.EventEnd }) {
		t.Fatalf("events %v: no %q event", r.events, api.EventEnd)
	}
	if rep := r.step(func(m *Machine, id uint64) { m.LeaveServer(id, "s0") }); rep.Err != nil {
		t.Fatalf("s0 leaves after the job: %v", rep.Err)
	}
	for _, s := range []string{"s1", "s0"} {
		if rep := r.step(func(m *Machine, id uint64) { m.ServerFailed(id, s, "") }); rep.Removed {
			t.Fatalf("%s exited with the cluster and was removed", s)
		}
	}
	if got := r.m.published; len(got.Servers) != 2 || got.Epoch != l.Epoch {
		t.Fatalf("after the servers exited: %d servers, epoch %d; want the ring and epoch %d unchanged", len(got.Servers), got.Epoch, l.Epoch)
	}
	var left []string
	for _, e := range r.events {
		if e.Kind == api.EventFailed {
			t.Fatalf("a planned exit recorded as a failure: %+v", e)
		}
		if e.Kind == api.EventLeft {
			left = append(left, e.Node)
		}
	}
	if !slices.Equal(left, []string{"s0", "s1"}) {
		t.Fatalf("left events for %v, want s0 and s1 once each", left)
	}
}

// leave asks for server s to leave, and returns the reply's error.
func (r *jobRig) leave(s string) error {
	r.t.Helper()
	return r.step(func(m *Machine, id uint64) { m.LeaveServer(id, s) }).Err
}

// drained reports, as servers do, the rebuild and the handoff of a
// draining leaver, and fails the test if it is still on the ring after.
func (r *jobRig) drained(leaver string) {
	r.t.Helper()
	l := r.m.published
	for _, s := range l.Servers {
		r.step(func(m *Machine, id uint64) { m.Rebuilt(id, api.Rebuilt{From: s.ID, Version: l.Version}) })
	}
	for _, s := range l.Servers {
		r.step(func(m *Machine, id uint64) { m.Synced(id, api.Synced{From: s.ID, Joiner: leaver, Version: l.Version}) })
	}
	if slices.ContainsFunc(r.m.published.Servers, func(s ring.Server) bool { return s.ID == leaver }) {
		r.t.Fatalf("%s still on the ring once every head shipped its slots", leaver)
	}
}

// TestLeaveAfterJob: on a cluster that stays up, a server that leaves
// after the job drains as during it, its slots shipped to the servers
// that stay (it left at once, and was then found dead and its slots
// copied again from the one other copy); two that leave together go one
// after the other; the last one leaves with the model, which the log and
// the timeline say, and its exit is no failure.
func TestLeaveAfterJob(t *testing.T) {
	r := newJobRig(t, Config{Servers: 3, Workers: 2, Partitions: 2, Replication: 2})
	for rank := range 2 {
		r.step(func(m *Machine, id uint64) { m.Report(id, rank, []byte(`{}`)) })
	}
	if l := r.m.published; !l.JobDone || l.Shutdown || len(l.Servers) != 3 {
		t.Fatalf("after the job: job_done %v shutdown %v, %d servers", l.JobDone, l.Shutdown, len(l.Servers))
	}
	leave, drained := r.leave, r.drained
	if err := leave("s0"); err != nil {
		t.Fatal(err)
	}
	if l := r.m.published; !slices.Equal(l.Leaving, []string{"s0"}) || len(l.Servers) != 3 {
		t.Fatalf("s0 asked to leave after the job: servers %v leaving %v; want it draining", l.Servers, l.Leaving)
	}
	drained("s0")
	if err := leave("s1"); err != nil {
		t.Fatal(err)
	}
	if err := leave("s2"); !errors.Is(err, api.ErrLastServer) {
		t.Fatalf("s2 asks while s1 drains to it: %v, want %v", err, api.ErrLastServer)
	}
	drained("s1")
	before := *r.m.published
	if err := leave("s2"); err != nil {
		t.Fatalf("the last server leaves after the job: %v", err)
	}
	if l := r.m.published; len(l.Servers) != 1 || l.Epoch != before.Epoch || !l.LastAfterJob("s2") {
		t.Fatalf("after the last server left: servers %v epoch %d (was %d)", l.Servers, l.Epoch, before.Epoch)
	}
	if rep := r.step(func(m *Machine, id uint64) { m.ServerFailed(id, "s2", "") }); rep.Removed {
		t.Fatal("the last server, gone after leaving, was removed")
	}
	var kinds []string
	for _, e := range r.events {
		if strings.HasPrefix(e.Node, "s") && e.Kind != api.EventJoin {
			kinds = append(kinds, e.Node+" "+e.Kind)
		}
		if e.Kind == api.EventLeft && e.Node == "s2" && !strings.Contains(e.Cause, "model went with it") {
			t.Fatalf("the last server's leaving does not say the model went: %q", e.Cause)
		}
	}
	want := []string{"s0 drain", "s0 left", "s1 drain", "s1 left", "s2 left"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("events %v, want %v", kinds, want)
	}
	for _, n := range r.m.Status().Nodes {
		if n.ID == "s2" && n.State != "left" {
			t.Fatalf("status of the last server after it left: %q, want left", n.State)
		}
	}
	// The next job on new servers: they take the ring of the server that
	// left (the job waited for good for its copy).
	r.nextJobOn(t, "s3", "127.0.0.1:4")
}

// endThenDrain ends the job (both ranks report) and drains server off
// the ring, leaving the last one.
func (r *jobRig) endThenDrain(t *testing.T, server string) {
	t.Helper()
	for rank := range 2 {
		r.step(func(m *Machine, id uint64) { m.Report(id, rank, []byte(`{}`)) })
	}
	if err := r.leave(server); err != nil {
		t.Fatal(err)
	}
	r.drained(server)
}

// nextJobOn joins a new server (id at addr) and submits a job, which must
// find the server alone on the ring: the last server left with the
// model, and the job waited for good for a copy from it.
func (r *jobRig) nextJobOn(t *testing.T, id, addr string) {
	t.Helper()
	r.step(func(m *Machine, rid uint64) { m.Join(rid, api.Join{Role: api.RoleServer, ID: id, Addr: addr}) })
	if rep := r.step(func(m *Machine, rid uint64) { m.SubmitJob(rid, api.Job{App: "lr", Passes: 1}) }); rep.Err != nil {
		t.Fatal(rep.Err)
	}
	if l := r.m.published; len(l.Servers) != 1 || l.Servers[0].ID != id || len(l.Joining) != 0 {
		t.Fatalf("the next job's ring %v, joining %v; want %s alone on the ring", l.Servers, l.Joining, id)
	}
}

// TestLastLeftSurvivesFailover: the last server, which left after the
// job with the model, is still known as gone by a coordinator restored
// from the saved state. One that did not know showed it serving every
// slot, and the next job's servers waited for good for a copy from it
// (by hand: the coordinator SIGTERMed and started again on its
// --etcd-dir, a job submitted, its workers "no server of the layout
// reachable").
func TestLastLeftSurvivesFailover(t *testing.T) {
	cfg := Config{Servers: 2, Workers: 2, Partitions: 2, Replication: 2}
	r := newJobRig(t, cfg)
	r.endThenDrain(t, "s0")
	if err := r.leave("s1"); err != nil {
		t.Fatalf("the last server leaves after the job: %v", err)
	}
	m, err := RestoreMachine(cfg, r.saved, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	r.m = m
	for _, n := range r.m.Status().Nodes {
		if n.ID == "s1" && n.State != "left" {
			t.Fatalf("status of the last server after a failover: %q, want left", n.State)
		}
	}
	r.nextJobOn(t, "s2", "127.0.0.1:3")
}

// TestCheckpointAfterLastLeft: once the last server left after the job
// with the model, a checkpoint is refused, saying so, and one begun
// before it left is abandoned. Both named the gone server and waited
// for good (by hand: checkpoint --now --wait after the last server's
// SIGTERM, "servers writing 0/1" until killed).
func TestCheckpointAfterLastLeft(t *testing.T) {
	cfg := Config{Servers: 2, Workers: 2, Partitions: 2, Replication: 2, CheckpointDir: "ck"}
	r := newJobRig(t, cfg)
	r.endThenDrain(t, "s0")
	r.m.st.DoneBefore = 1 // a pass trained (the rig trains none): a finished job's checkpoint begins at once
	if rep := r.step(func(m *Machine, id uint64) { m.RequestCheckpoint(id, true) }); rep.Err != nil || r.m.published.Checkpoint == nil {
		t.Fatalf("a checkpoint after the job: %v, in progress %v", rep.Err, r.m.published.Checkpoint)
	}
	if err := r.leave("s1"); err != nil {
		t.Fatalf("the last server leaves after the job: %v", err)
	}
	if ck := r.m.st.Checkpoint; r.m.published.Checkpoint != nil || ck.Abandoned != 1 {
		t.Fatalf("checkpoint 1 of the server that left: in progress %v, abandoned %d", r.m.published.Checkpoint, ck.Abandoned)
	}
	for _, now := range []bool{false, true} {
		rep := r.step(func(m *Machine, id uint64) { m.RequestCheckpoint(id, now) })
		if !errors.Is(rep.Err, api.ErrNothingToCheckpoint) || !strings.Contains(rep.Err.Error(), "model went with it") {
			t.Fatalf("a checkpoint (now %v) after the last server left: %v", now, rep.Err)
		}
	}
	if l := r.m.published; l.Checkpoint != nil {
		t.Fatalf("checkpoint %d begun with no server holding the model", l.Checkpoint.Seq)
	}
}

// TestExamplesAccount: each pass's examples account arrives with its
// evaluation; the status sums them, only the first result of a pass
// counts, a pass with rows repeated or skipped is an event, and a new
// leader still has the sums.
func TestExamplesAccount(t *testing.T) {
	r := newJobRig(t, Config{Servers: 2, Workers: 2, Partitions: 2, Replication: 2})
	report := func(rank, pass int, a *api.ExamplesAccount) {
		t.Helper()
		r.claim(rank, pass)
		if rep := r.step(func(m *Machine, id uint64) { m.EvalResult(id, api.PassResult{Pass: pass, Rank: rank, Examples: a}) }); rep.Err != nil {
			t.Fatal(rep.Err)
		}
	}
	report(0, 1, &api.ExamplesAccount{Rows: 100, Trained: 100})
	report(1, 2, &api.ExamplesAccount{Rows: 100, Trained: 107, Repeated: 9, Skipped: 2})
	// A late second result of pass 2 (its first holder was thought dead)
	// does not count twice.
	r.step(func(m *Machine, id uint64) {
		m.EvalResult(id, api.PassResult{Pass: 2, Rank: 0, Examples: &api.ExamplesAccount{Rows: 100, Trained: 150, Repeated: 50}})
	})
	report(0, 3, nil) // a worker that keeps no account
	want := func(m *Machine, when string) {
		t.Helper()
		if j := m.Status().Job; j.Accounted != 2 || j.Repeated != 9 || j.Skipped != 2 {
			t.Errorf("%s: accounted %d, repeated %d, skipped %d; want 2, 9, 2", when, j.Accounted, j.Repeated, j.Skipped)
		}
	}
	want(r.m, "after three passes")
	var accounts []string
	for _, e := range r.events {
		if e.Kind == api.EventAccount {
			accounts = append(accounts, e.Cause)
		}
	}
	if len(accounts) != 1 || accounts[0] != "pass 2: 107 trainings of 100 rows, 9 repeated, 2 skipped" {
		t.Errorf("account events %q, want one of pass 2", accounts)
	}
	m, err := RestoreMachine(r.m.cfg, r.saved, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	want(m, "a new leader")
}

// TestResumedPassesNotEvaluatedAgain: a job resumed from a checkpoint
// after pass 3 evaluates pass 3 (the restored model) and what follows,
// not passes 1 and 2: every worker reported the restored model under
// each of their numbers, as if each had been trained again.
func TestResumedPassesNotEvaluatedAgain(t *testing.T) {
	m := NewMachine(Config{Servers: 2, Workers: 2, Partitions: 2, Replication: 2}, t0)
	m.Resume(Resumed{Dir: "ckpt", Seq: 1, Pass: 2}) // passes numbered from 0: three done
	r := &jobRig{t: t, m: m}
	for i, id := range []string{"s0", "s1"} {
		r.step(func(m *Machine, rid uint64) {
			m.Join(rid, api.Join{Role: api.RoleServer, ID: id, Addr: "127.0.0.1:" + string(rune('1'+i))})
		})
	}
	for _, id := range []string{"w0", "w1"} {
		r.step(func(m *Machine, rid uint64) { m.Join(rid, api.Join{Role: api.RoleWorker, ID: id}) })
	}
	for pass := 1; pass <= 2; pass++ {
		if got := r.claim(0, pass); len(got) != 0 {
			t.Errorf("restored pass %d handed out for evaluation: %v", pass, got)
		}
	}
	if got := r.claim(0, 3); !slices.Equal(got, []int{3}) {
		t.Errorf("the checkpoint's last pass: claim got %v, want [3]", got)
	}
	var restored []int
	for _, res := range r.m.JobStatus().Results {
		if res.Restored {
			restored = append(restored, res.Pass)
		}
	}
	if !slices.Equal(restored, []int{1, 2}) {
		t.Errorf("passes marked restored %v, want [1 2]", restored)
	}
}

// TestResumedJob: a coordinator resumed from a checkpoint holds the job
// that wrote it, so that workers started with no job flags train it (they
// waited for a job nobody would submit); a job submitted before any
// worker joins replaces it (train --resume with more passes), one
// submitted after is refused as any other.
func TestResumedJob(t *testing.T) {
	ckpt := api.Job{App: "lr", Train: "a9a.gz", Passes: 10}
	more := ckpt
	more.Passes = 20
	m := NewMachine(Config{Servers: 2, Workers: 2, Partitions: 2, Replication: 2}, t0)
	m.Resume(Resumed{Dir: "ckpt", Seq: 1, Pass: 4, Job: &ckpt})
	r := &jobRig{t: t, m: m}
	if j := r.m.JobStatus().Job; j == nil || *j != ckpt {
		t.Fatalf("resumed job %+v, want the checkpoint's %+v", j, ckpt)
	}
	if rep := r.step(func(m *Machine, id uint64) { m.SubmitJob(id, more) }); rep.Err != nil || *rep.Job != more {
		t.Fatalf("a job submitted before any worker joined: %v, job %+v; want it to replace the checkpoint's", rep.Err, rep.Job)
	}
	r.step(func(m *Machine, id uint64) { m.Join(id, api.Join{Role: api.RoleWorker, ID: "w0"}) })
	if rep := r.step(func(m *Machine, id uint64) { m.SubmitJob(id, ckpt) }); !errors.Is(rep.Err, api.ErrJobConflict) {
		t.Errorf("another job once a worker joined: %v, want ErrJobConflict", rep.Err)
	}

	// Another app, other data, or tables of other widths (nn's --hidden:
	// refused only by the table's create, in a worker, after the cluster
	// formed) cannot go on from the checkpoint's model: refused, the
	// checkpoint's job kept.
	nn := api.Job{App: "nn", Train: "mnist.gz", Hidden: 32, Passes: 10}
	for _, tc := range []struct{ ckpt, other api.Job }{
		{ckpt, api.Job{App: "lda", Passes: 20}}, {ckpt, api.Job{App: "lr", Train: "other.gz", Passes: 20}},
		{nn, api.Job{App: "nn", Train: "mnist.gz", Hidden: 64, Passes: 10}},
	} {
		ckpt, other := tc.ckpt, tc.other
		m = NewMachine(Config{Servers: 2, Workers: 2, Partitions: 2, Replication: 2}, t0)
		m.Resume(Resumed{Dir: "ckpt", Seq: 1, Pass: 4, Job: &ckpt})
		r = &jobRig{t: t, m: m}
		if rep := r.step(func(m *Machine, id uint64) { m.SubmitJob(id, other) }); !errors.Is(rep.Err, api.ErrJobConflict) || *rep.Job != ckpt {
			t.Errorf("job %+v on a checkpoint of %+v: %v, job %+v; want ErrJobConflict and the checkpoint's", other, ckpt, rep.Err, rep.Job)
		}
	}

	// Fewer passes than the checkpoint holds: refused, saying how many it
	// holds. It trained nothing and wrote no model, and exited 0.
	m = NewMachine(Config{Servers: 2, Workers: 2, Partitions: 2, Replication: 2}, t0)
	m.Resume(Resumed{Dir: "ckpt", Seq: 1, Pass: 4, Job: &ckpt})
	r = &jobRig{t: t, m: m}
	fewer := ckpt
	fewer.Passes = 3
	if rep := r.step(func(m *Machine, id uint64) { m.SubmitJob(id, fewer) }); !errors.Is(rep.Err, api.ErrJobConflict) || !strings.Contains(rep.Err.Error(), "ask for 5 or more") {
		t.Errorf("a job of 3 passes on a checkpoint after pass 5: %v, want ErrJobConflict asking for 5 or more", rep.Err)
	}
	same := ckpt
	same.Passes = 5
	if rep := r.step(func(m *Machine, id uint64) { m.SubmitJob(id, same) }); rep.Err != nil {
		t.Errorf("a job of as many passes as the checkpoint holds: %v, want it taken (it evaluates and writes the model)", rep.Err)
	}

	// Resumed and joined before anyone submitted: the checkpoint's job is
	// in force.
	m = NewMachine(Config{Servers: 2, Workers: 2, Partitions: 2, Replication: 2}, t0)
	m.Resume(Resumed{Dir: "ckpt", Seq: 1, Pass: 4, Job: &ckpt})
	r = &jobRig{t: t, m: m}
	r.step(func(m *Machine, id uint64) { m.Join(id, api.Join{Role: api.RoleWorker, ID: "w0"}) })
	if rep := r.step(func(m *Machine, id uint64) { m.SubmitJob(id, more) }); !errors.Is(rep.Err, api.ErrJobConflict) {
		t.Errorf("another job after a worker took the checkpoint's: %v, want ErrJobConflict", rep.Err)
	}
}

// TestServerFailedSaysOnlyCopyLost: a server that fails while it holds
// the only copy of its slots (--replication 1) is said to take them with
// it; with k = 2 its slots fall to the copies. The timeline said they
// fall to the next servers either way.
func TestServerFailedSaysOnlyCopyLost(t *testing.T) {
	for _, k := range []int{1, 2} {
		r := newJobRig(t, Config{Servers: 3, Workers: 2, Partitions: 2, Replication: k})
		if rep := r.step(func(m *Machine, id uint64) { m.CreateTable(id, table.Spec{Name: "w", Width: 1}) }); rep.Err != nil {
			t.Fatal(rep.Err)
		}
		if rep := r.step(func(m *Machine, id uint64) { m.ServerFailed(id, "s1", "") }); !rep.Removed {
			t.Fatalf("k=%d: s1 not removed", k)
		}
		i := slices.IndexFunc(r.events, func(e api.Event) bool { return e.Kind == api.EventFailed && e.Node == "s1" })
		if i < 0 {
			t.Fatalf("k=%d: no failed event for s1: %v", k, r.events)
		}
		if lost := strings.Contains(r.events[i].Cause, "only copy"); lost != (k == 1) {
			t.Errorf("k=%d: %q", k, r.events[i].Cause)
		}
	}
}

// trainRows creates table w and records n rows of rank 0's first grant
// of pass 0 trained.
func trainRows(t *testing.T, r *jobRig, n int) {
	t.Helper()
	if rep := r.step(func(m *Machine, id uint64) { m.CreateTable(id, table.Spec{Name: "w", Width: 1}) }); rep.Err != nil {
		t.Fatal(rep.Err)
	}
	rep := r.step(func(m *Machine, id uint64) { m.Acquire(id, api.Acquire{Rank: 0, Pass: 0}) })
	if rep.Err != nil || rep.Grant.Partition < 0 {
		t.Fatalf("acquire: %v, %+v", rep.Err, rep.Grant)
	}
	g := rep.Grant
	if rep := r.step(func(m *Machine, id uint64) {
		m.Progress(id, api.Update{Rank: 0, Pass: 0, Partition: g.Partition, Offset: g.Offset + n, Lease: g.Lease}, 0, 0)
	}); rep.Err != nil {
		t.Fatalf("progress: %v", rep.Err)
	}
}
