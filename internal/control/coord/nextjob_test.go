package coord

import (
	"errors"
	"testing"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/table"
)

// runJob takes a rig whose two workers joined through a job: a table, a
// piece leased, an evaluation claimed, a worker gone, then every report.
func runJob(t *testing.T, r *jobRig, j api.Job) {
	t.Helper()
	if rep := r.step(func(m *Machine, id uint64) { m.SubmitJob(id, j) }); rep.Err != nil {
		t.Fatalf("submit %+v: %v", j, rep.Err)
	}
	if rep := r.step(func(m *Machine, id uint64) { m.CreateTable(id, table.Spec{Name: "w", Width: 1}) }); rep.Err != nil {
		t.Fatal(rep.Err)
	}
	if rep := r.step(func(m *Machine, id uint64) { m.Acquire(id, api.Acquire{Rank: 0, Pass: 0}) }); rep.Err != nil || rep.Grant.Partition < 0 {
		t.Fatalf("acquire: %v, %+v", rep.Err, rep.Grant)
	}
	r.claim(0, 1)
	r.step(func(m *Machine, id uint64) { m.Leave(id, 1) })
	if rep := r.step(func(m *Machine, id uint64) { m.Report(id, 0, []byte(`{"job":1}`)) }); rep.Err != nil {
		t.Fatal(rep.Err)
	}
	if !r.m.published.JobDone {
		t.Fatal("the job is not done after every worker reported or left")
	}
}

// TestNextJob: on a cluster that stays up, a job submitted after the
// last one ended starts afresh on the same servers: nothing of the old
// job's workers, pieces, reports, evaluations or tables is left, its
// tables are numbered after the old ones, the layout begins an epoch and
// waits for the new workers; a job submitted while one runs is refused.
func TestNextJob(t *testing.T) {
	r := newJobRig(t, Config{Servers: 2, Workers: 2, Partitions: 2, Replication: 2})
	first := api.Job{App: "lr", Train: "a9a", Passes: 5, Consistency: "ssp:2"}
	runJob(t, r, first)
	before := *r.m.published
	if before.Tables[0].ID != 1 || len(before.Finished) != 1 {
		t.Fatalf("first job's layout: tables %+v finished %v", before.Tables, before.Finished)
	}

	second := first
	second.Passes = 2
	r.m.st.Trained = 400000 // the first job's rows (runJob records no progress)
	// Rank 0's clock: the next job's rank 0 was shown at it.
	if err := r.m.Heartbeat(0, 7994); err != nil {
		t.Fatal(err)
	}
	if rep := r.step(func(m *Machine, id uint64) { m.SubmitJob(id, second) }); rep.Err != nil || *rep.Job != second {
		t.Fatalf("the next job: %v, %+v", rep.Err, rep.Job)
	}
	// terrace status showed the first job's rows as the next one's, and
	// estimated the next job's ETA from them.
	if ex := r.m.Status().Job.Examples; ex != 0 {
		t.Fatalf("the next job starts with %d examples trained, want 0", ex)
	}
	l := r.m.published
	if l.Job != 1 || l.JobDone || l.Ready || len(l.Tables) != 0 || len(l.Finished) != 0 || l.Workers != 2 ||
		len(l.Servers) != 2 || l.Epoch <= before.Epoch {
		t.Fatalf("layout of the next job: job %d done %v ready %v tables %v finished %v workers %d servers %d epoch %d (was %d)",
			l.Job, l.JobDone, l.Ready, l.Tables, l.Finished, l.Workers, len(l.Servers), l.Epoch, before.Epoch)
	}
	st := r.m.JobStatus()
	if st.Number != 2 || st.PassesDone != 0 || len(st.Results) != 0 || len(st.Workers) != 0 || len(r.m.st.Reports) != 0 ||
		len(r.m.st.Passes) != 0 || len(r.m.st.Evals) != 0 || len(r.m.beats) != 0 || len(r.m.clocks) != 0 {
		t.Fatalf("state of the next job: %+v; reports %v passes %v evals %v beats %v clocks %v", st, r.m.st.Reports, r.m.st.Passes, r.m.st.Evals, r.m.beats, r.m.clocks)
	}
	// A heartbeat late from the old job's rank 1 starts no failure timeout.
	if err := r.m.Heartbeat(1, 0); !errors.Is(err, api.ErrBadRequest) {
		t.Fatalf("heartbeat of a rank nobody holds: %v, want ErrBadRequest", err)
	}

	// The new workers (same IDs as the old ones) get ranks from 0 again.
	for i, id := range []string{"w0", "w1"} {
		if rep := r.step(func(m *Machine, rid uint64) { m.Join(rid, api.Join{Role: api.RoleWorker, ID: id}) }); rep.Err != nil || rep.Rank != i {
			t.Fatalf("worker %s of the next job: rank %d, %v", id, rep.Rank, rep.Err)
		}
	}
	if !r.m.published.Ready {
		t.Fatal("the next job's layout is not ready once its workers joined")
	}
	if rep := r.step(func(m *Machine, id uint64) { m.CreateTable(id, table.Spec{Name: "w", Width: 1}) }); rep.Err != nil {
		t.Fatal(rep.Err)
	}
	if tb := r.m.published.Tables; len(tb) != 1 || tb[0].ID != 2 {
		t.Fatalf("the next job's tables: %+v, want \"w\" as table 2", tb)
	}
	other := second
	other.Passes = 7
	if rep := r.step(func(m *Machine, id uint64) { m.SubmitJob(id, other) }); !errors.Is(rep.Err, api.ErrJobConflict) {
		t.Fatalf("a job submitted while the next one runs: %v, want ErrJobConflict", rep.Err)
	}

	// A new leader has the job number and where table IDs go on.
	m, err := RestoreMachine(r.m.cfg, r.saved, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	if m.st.Layout.Job != 1 || m.st.TableBase != 1 || *m.st.Job != second {
		t.Fatalf("restored: job %d table base %d job %+v", m.st.Layout.Job, m.st.TableBase, m.st.Job)
	}
}

// TestNextJobRefusedAtShutdown: a cluster that ends with its job takes
// no next one.
func TestNextJobRefusedAtShutdown(t *testing.T) {
	r := newJobRig(t, Config{Servers: 2, Workers: 2, Partitions: 2, Replication: 2, ExitWhenDone: true})
	j := api.Job{App: "lr", Train: "a9a", Passes: 5, Consistency: "ssp:2"}
	runJob(t, r, j)
	if rep := r.step(func(m *Machine, id uint64) { m.SubmitJob(id, j) }); !errors.Is(rep.Err, api.ErrJobConflict) {
		t.Fatalf("a job submitted after the end of a cluster that exits: %v, want ErrJobConflict", rep.Err)
	}
}

// TestReplaceUnstartedJob: a job none of whose workers is alive and that
// trained nothing (its workers failed after their join, as on a malformed
// data line) is replaced by a different job submitted next; one with a
// live worker, or with a trained row, is not.
func TestReplaceUnstartedJob(t *testing.T) {
	bad := api.Job{App: "lr", Train: "bad.txt", Passes: 2, Consistency: "ssp:2"}
	good := bad
	good.Train = "good.txt"
	submit := func(r *jobRig, j api.Job) error {
		return r.step(func(m *Machine, id uint64) { m.SubmitJob(id, j) }).Err
	}

	r := newJobRig(t, Config{Servers: 2, Workers: 2, Partitions: 2, Replication: 2})
	if err := submit(r, bad); err != nil {
		t.Fatal(err)
	}
	r.step(func(m *Machine, id uint64) { m.Leave(id, 0) })
	if err := submit(r, good); !errors.Is(err, api.ErrJobConflict) {
		t.Fatalf("a job with a live worker replaced: %v, want ErrJobConflict", err)
	}
	r.step(func(m *Machine, id uint64) { m.Leave(id, 1) })
	if err := submit(r, good); err != nil {
		t.Fatalf("a job whose workers all failed before training: %v, want it replaced", err)
	}
	if st := r.m.JobStatus(); st.Number != 2 || *st.Job != good || st.Done || len(st.Workers) != 0 {
		t.Fatalf("after the replacement: job %d %+v done %v workers %v", st.Number, st.Job, st.Done, st.Workers)
	}

	// A job that trained a row keeps the cluster until it ends.
	r = newJobRig(t, Config{Servers: 2, Workers: 2, Partitions: 2, Replication: 2})
	if err := submit(r, bad); err != nil {
		t.Fatal(err)
	}
	trainRows(t, r, 1)
	r.step(func(m *Machine, id uint64) { m.Leave(id, 0) })
	r.step(func(m *Machine, id uint64) { m.Leave(id, 1) })
	if err := submit(r, good); !errors.Is(err, api.ErrJobConflict) {
		t.Fatalf("a job that trained a row replaced: %v, want ErrJobConflict", err)
	}
}

// TestNextJobForgetsGoneWorkers: the old job's workers that left or
// died are not listed by the next job's status. Its server list took
// every gone node that was not one of the current job's workers, so the
// old job's gone workers showed as dead or left servers.
func TestNextJobForgetsGoneWorkers(t *testing.T) {
	r := newJobRig(t, Config{Servers: 2, Workers: 2, Partitions: 2, Replication: 2})
	j := api.Job{App: "lr", Train: "a9a", Passes: 5, Consistency: "ssp:2"}
	runJob(t, r, j)
	j.Passes = 2
	if rep := r.step(func(m *Machine, id uint64) { m.SubmitJob(id, j) }); rep.Err != nil {
		t.Fatalf("the next job: %v", rep.Err)
	}
	for _, n := range r.m.Status().Nodes {
		if n.Role != api.RoleServer || n.ID == "w0" || n.ID == "w1" {
			t.Errorf("the next job's status lists %s %s (%s), a worker of the old job", n.Role, n.ID, n.State)
		}
	}
}
