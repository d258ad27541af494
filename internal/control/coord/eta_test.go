package coord

import (
	"fmt"
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/table"
)

// TestETAs: the pass's ETA counts the partitions it has left, the job's
// also every pass after it; unknown rates, passes or progress give 0.
func TestETAs(t *testing.T) {
	// Pass 2 (the third) of 10, 3 of 8 partitions done: 19 partitions
	// trained of 100 rows each, at 100 rows/s.
	p := api.Progress{Pass: 2, Partitions: 8, Done: 3, Examples: 1900, Rate: 100}
	for _, tc := range []struct {
		name      string
		p         api.Progress
		passes    int
		pass, job time.Duration
	}{
		{"mid-job", p, 10, 5 * time.Second, (5 + 7*8) * time.Second},
		{"last pass", p, 3, 5 * time.Second, 5 * time.Second},
		{"passes unknown", p, 0, 5 * time.Second, 0},
		{"no rate yet", api.Progress{Pass: 2, Partitions: 8, Done: 3, Examples: 1900}, 10, 0, 0},
		{"no partition done yet", api.Progress{Pass: 0, Partitions: 8, Examples: 50, Rate: 100}, 10, 0, 0},
		// A pass boundary: 24 partitions of 100 rows done before it.
		{"pass boundary", api.Progress{Pass: 3, Partitions: 8, Examples: 2400, Rate: 100}, 10, 8 * time.Second, (8 + 6*8) * time.Second},
		// Resumed from a checkpoint of 2 passes: the same 19 partitions
		// counted, after 16 that were not.
		{"resumed", api.Progress{Pass: 4, Partitions: 8, Done: 3, Examples: 1900, ExamplesFrom: 16, Rate: 100}, 12, 5 * time.Second, (5 + 7*8) * time.Second},
		{"resumed, none counted yet", api.Progress{Pass: 2, Partitions: 8, Examples: 50, ExamplesFrom: 16, Rate: 100}, 10, 0, 0},
	} {
		pass, job := etas(tc.p, tc.passes)
		if pass != tc.pass || job != tc.job {
			t.Errorf("%s: pass %v job %v, want %v and %v", tc.name, pass, job, tc.pass, tc.job)
		}
	}
}

// TestNoETAWhenDone: a finished job's status has no ETA. Its pass ETA
// was the time to train a whole pass again at the last minute's rate.
func TestNoETAWhenDone(t *testing.T) {
	st := api.Status{Definition: &api.JobStatus{Job: &api.Job{Passes: 3}, PassesDone: 3},
		Job:   api.Progress{Pass: 3, Partitions: 8, Examples: 2400, Rate: 100},
		Nodes: []api.NodeStatus{{Role: api.RoleWorker, ID: "w0", State: "training"}}}
	if pass, _ := statusETAs(st); pass == 0 {
		t.Fatal("the running job's last pass boundary has no pass ETA")
	}
	st.Definition.Done = true
	if pass, job := statusETAs(st); pass != 0 || job != 0 {
		t.Fatalf("a finished job: pass ETA %v, job ETA %v; want none", pass, job)
	}
}

// TestNoETAWithoutWorkers: a job no worker is alive to train has no ETA.
// Once every worker had drained, its job ETA grew with the decaying rate
// ("job eta 21s", 24s, 38s, 51s 5 s apart: lr on a9a, both workers
// SIGTERMed mid-job).
func TestNoETAWithoutWorkers(t *testing.T) {
	st := api.Status{Definition: &api.JobStatus{Job: &api.Job{Passes: 150}, PassesDone: 41},
		Job: api.Progress{Pass: 41, Partitions: 8, Examples: 1335001, Rate: 93684}}
	for _, tc := range []struct {
		states []string
		eta    bool
	}{
		{[]string{"training", "left"}, true},
		{[]string{"idle", "dead"}, true},
		{[]string{"left", "left"}, false},
		{[]string{"dead", "left"}, false},
		{nil, false},
	} {
		st.Nodes = []api.NodeStatus{{Role: api.RoleServer, ID: "s0", State: "serving"}}
		for i, s := range tc.states {
			st.Nodes = append(st.Nodes, api.NodeStatus{Role: api.RoleWorker, ID: fmt.Sprint("w", i), State: s})
		}
		pass, job := statusETAs(st)
		if (pass != 0 && job != 0) != tc.eta {
			t.Errorf("workers %v: pass ETA %v, job ETA %v; want an ETA: %v", tc.states, pass, job, tc.eta)
		}
	}
}

// TestExamplesSurviveFailover: a new leader's status counts the job's
// rows trained before it took over. It counted only those it saw, and
// estimated the job's ETA from them against every partition done: a
// fifth of the truth a pass after a failover after pass 4 of 20 (lr on
// a9a, 4 workers, 16 partitions).
func TestExamplesSurviveFailover(t *testing.T) {
	r := newJobRig(t, Config{Servers: 2, Workers: 2, Partitions: 2, Replication: 2})
	if rep := r.step(func(m *Machine, id uint64) { m.SubmitJob(id, api.Job{App: "lr", Passes: 3}) }); rep.Err != nil {
		t.Fatal(rep.Err)
	}
	trainRows(t, r, 300)
	if ex := r.m.Status().Job.Examples; ex != 300 {
		t.Fatalf("the leader counts %d examples, want 300", ex)
	}
	m, err := RestoreMachine(r.m.cfg, r.saved, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	if ex := m.Status().Job.Examples; ex != 300 {
		t.Fatalf("a new leader counts %d examples, want the 300 trained before it took over", ex)
	}
}

// TestTrainingRate: the rate counts from the last sample before training
// began in the window; an idle minute before the job diluted it.
func TestTrainingRate(t *testing.T) {
	at := func(sec int, rows int64) sample { return sample{t0.Add(time.Duration(sec) * time.Second), rows} }
	for _, tc := range []struct {
		name    string
		samples []sample
		want    float64
	}{
		{"training throughout", []sample{at(0, 0), at(1, 100), at(4, 400)}, 100},
		{"idle before the job", []sample{at(0, 5000), at(20, 5000), at(56, 5000), at(57, 5100), at(60, 5400)}, 100},
		{"a stall inside", []sample{at(0, 0), at(1, 100), at(3, 100), at(4, 200)}, 50},
		{"idle throughout", []sample{at(0, 7), at(30, 7)}, 0},
		{"one sample", []sample{at(0, 7)}, 0},
	} {
		if got := trainingRate(tc.samples); got != tc.want {
			t.Errorf("%s: rate %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestGoneSurvivesFailover: a new leader's status shows a drained worker
// as left, as the old leader's did. How nodes went was not saved: every
// drained worker showed as dead after a failover (lr on a9a, 4 worker
// processes, one SIGTERMed, the coordinator SIGKILLed 1.5 s later).
func TestGoneSurvivesFailover(t *testing.T) {
	r := newJobRig(t, Config{Servers: 2, Workers: 2, Partitions: 2, Replication: 2})
	r.step(func(m *Machine, id uint64) { m.Leave(id, 1) })
	state := func(m *Machine) string {
		for _, n := range m.Status().Nodes {
			if n.ID == "w1" {
				return n.State
			}
		}
		return "missing"
	}
	if s := state(r.m); s != "left" {
		t.Fatalf("the leader shows the drained worker %s, want left", s)
	}
	m, err := RestoreMachine(r.m.cfg, r.saved, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	if s := state(m); s != "left" {
		t.Fatalf("a new leader shows the drained worker %s, want left", s)
	}
}

// TestMachinesSurviveFailover: a new leader's status names the machine
// each node joined with. Kept only in memory, it named each worker's ID
// after a takeover: two transient machines of two nodes each were
// counted as four, and charged so at --price.
func TestMachinesSurviveFailover(t *testing.T) {
	r := &jobRig{t: t, m: NewMachine(Config{Servers: 1, Workers: 1, Partitions: 1, Replication: 1}, t0)}
	r.step(func(m *Machine, id uint64) {
		m.Join(id, api.Join{Role: api.RoleServer, ID: "s0", Addr: "127.0.0.1:1", Machine: "m0"})
	})
	r.step(func(m *Machine, id uint64) { m.Join(id, api.Join{Role: api.RoleWorker, ID: "w0", Machine: "m0"}) })
	machines := func(m *Machine) map[string]string {
		got := map[string]string{}
		for _, n := range m.Status().Nodes {
			got[n.ID] = n.Machine
		}
		return got
	}
	want := map[string]string{"s0": "m0", "w0": "m0"}
	if got := machines(r.m); !maps.Equal(got, want) {
		t.Fatalf("the leader names machines %v, want %v", got, want)
	}
	m, err := RestoreMachine(r.m.cfg, r.saved, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got := machines(m); !maps.Equal(got, want) {
		t.Fatalf("a new leader names machines %v, want %v", got, want)
	}
}

// TestRateOfADoneJob: a finished job's status keeps the rate of its last
// minute of training, and the next job's starts afresh. The rate decayed
// to 0 in the minute after the job (lr on a9a: 140,804, 128,319 and
// 116,289 rows/s 5 s apart once done).
func TestRateOfADoneJob(t *testing.T) {
	var r rateSamples
	at := func(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }
	for s := 0; s <= 10; s++ {
		r.add(at(float64(s)), int64(100*s), false)
	}
	// The last rows, then the workers' evaluation and reports: the job is
	// done 2.5 s after its last row.
	r.add(at(10.5), 1050, false) // under a second after the last: not taken
	r.add(at(11), 1100, false)
	r.add(at(12), 1100, false)
	r.add(at(13.5), 1100, true)
	for _, sec := range []float64{14, 30, 75, 200} {
		r.add(at(sec), 1100, true)
		if got := r.rate(); got != 100 {
			t.Fatalf("%v s after a job that trained 100 rows/s to its end at 11 s: rate %v", sec, got)
		}
	}
	// The next job starts at 300 s, after an idle wait.
	r.add(at(300), 1100, false)
	r.add(at(310), 1100, false)
	r.add(at(311), 1150, false)
	r.add(at(313), 1250, false)
	if got := r.rate(); got != 50 {
		t.Fatalf("the next job's rate %v, want 50", got)
	}
}

// TestLastServerDownInStatus: the last server on the ring found dead is
// kept there (its slots have nowhere to go), and the status says it is
// down, with no ETA, until it answers again. It showed "serving 100% of
// slots" and a job ETA for a job that waited for it (lr on a9a: the
// whole cluster SIGKILLed and its coordinator started again on its
// --etcd-dir, the one old server left on the ring gone).
func TestLastServerDownInStatus(t *testing.T) {
	r := newJobRig(t, Config{Servers: 2, Workers: 2, Partitions: 2, Replication: 2})
	if rep := r.step(func(m *Machine, id uint64) { m.SubmitJob(id, api.Job{App: "lr", Passes: 3}) }); rep.Err != nil {
		t.Fatal(rep.Err)
	}
	trainRows(t, r, 300)
	state := func() (string, bool) {
		st := r.m.Status()
		st.Job = api.Progress{Pass: 1, Partitions: 2, Done: 1, Examples: 300, Rate: 100} // an ETA but for the servers
		pass, _ := statusETAs(st)
		for _, n := range st.Nodes {
			if n.ID == "s0" {
				return n.State, pass != 0
			}
		}
		return "", pass != 0
	}
	if rep := r.step(func(m *Machine, id uint64) { m.ServerFailed(id, "s1", "") }); !rep.Removed {
		t.Fatal("s1 failed and was kept while s0 holds its slots")
	}
	if s, eta := state(); s != "serving" || !eta {
		t.Fatalf("s0, the last server, alive: %q, an ETA %v", s, eta)
	}
	if rep := r.step(func(m *Machine, id uint64) { m.ServerFailed(id, "s0", "") }); rep.Removed {
		t.Fatal("the last server on the ring was removed")
	}
	if s, eta := state(); s != "down" || eta {
		t.Fatalf("s0, the last server, dead: %q, an ETA %v; want down, none", s, eta)
	}
	r.step(func(m *Machine, id uint64) { m.ServerAnswers(id, "s0", "127.0.0.1:1") })
	if s, eta := state(); s != "serving" || !eta {
		t.Fatalf("s0 answering again: %q, an ETA %v", s, eta)
	}
}

// TestRateOfAShortJob: a finished job's rate is its rows over the time
// from its first lease to its last rows, at the leader and at a new one.
// From samples a second apart, a job of 300 ms showed all its rows in one
// second (5 lr passes in under 2 s: 162,805 rows/s); a new leader, which
// had no samples, showed 0.
func TestRateOfAShortJob(t *testing.T) {
	r := newJobRig(t, Config{Servers: 2, Workers: 2, Partitions: 2, Replication: 2})
	if rep := r.step(func(m *Machine, id uint64) { m.SubmitJob(id, api.Job{App: "lr", Passes: 1}) }); rep.Err != nil {
		t.Fatal(rep.Err)
	}
	r.m.SetNow(t0.Add(10 * time.Second)) // the first lease
	if rep := r.step(func(m *Machine, id uint64) { m.CreateTable(id, table.Spec{Name: "w", Width: 1}) }); rep.Err != nil {
		t.Fatal(rep.Err)
	}
	g := r.step(func(m *Machine, id uint64) { m.Acquire(id, api.Acquire{Rank: 0, Pass: 0}) }).Grant
	r.m.SetNow(t0.Add(10*time.Second + 300*time.Millisecond)) // its rows, 300 ms later
	if rep := r.step(func(m *Machine, id uint64) {
		m.Progress(id, api.Update{Rank: 0, Pass: 0, Partition: g.Partition, Offset: g.Offset + 300, Lease: g.Lease}, 0, 0)
	}); rep.Err != nil {
		t.Fatal(rep.Err)
	}
	r.m.SetNow(t0.Add(12 * time.Second)) // evaluation and reports
	for rank := range 2 {
		r.step(func(m *Machine, id uint64) { m.Report(id, rank, []byte(`{}`)) })
	}
	if !r.m.published.JobDone {
		t.Fatal("the job is not done")
	}
	leader := New(Options{Servers: 2, Workers: 2, Partitions: 2})
	leader.m = r.m
	leader.rate.add(t0.Add(10*time.Second), 0, false)
	leader.rate.add(t0.Add(11*time.Second), 300, false)
	leader.rate.add(t0.Add(12*time.Second), 300, true)
	restored, err := RestoreMachine(r.m.cfg, r.saved, 0, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	next := New(Options{Servers: 2, Workers: 2, Partitions: 2})
	next.m = restored
	for who, c := range map[string]*Coordinator{"the leader": leader, "a new leader": next} {
		if got := c.statusLocked(t0.Add(time.Minute)).Job.Rate; math.Abs(got-1000) > 1e-6 {
			t.Errorf("%s: a done job's rate %v rows/s, want 1000 (300 rows in 300 ms)", who, got)
		}
	}
	// A running job's, at a new leader with no samples yet: it showed 0.
	running, err := RestoreMachine(r.m.cfg, r.saved, 0, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	running.st.Layout.JobDone = false
	next.m = running
	if got := next.statusLocked(t0.Add(time.Minute)).Job.Rate; math.Abs(got-1000) > 1e-6 {
		t.Errorf("a new leader, with no samples: a running job's rate %v rows/s, want 1000", got)
	}
}

// TestLastServerDiesAfterJob: the last server on the ring found dead after
// the job is said to be gone with the model, shown dead, and replaced by
// the next job's server. Nothing was said (lastServerDown stopped at the
// job's end), the status showed it serving every slot for good, also one
// that served out its notice as the job ended and exited at its deadline.
// One only stopped that answers again is back, with the model.
func TestLastServerDiesAfterJob(t *testing.T) {
	for _, how := range []string{"pings", "registration"} {
		t.Run(how, func(t *testing.T) {
			r := newJobRig(t, Config{Servers: 2, Workers: 2, Partitions: 2, Replication: 2})
			r.endThenDrain(t, "s0")
			r.events = nil
			if how == "pings" {
				r.step(func(m *Machine, id uint64) { m.ServerFailed(id, "s1", "") })
			} else {
				r.step(func(m *Machine, id uint64) { // as failure.go's probe of a lapsed registration
					m.lastServerDown("s1", "lost its etcd registration and does not answer a dial")
					m.reply(Reply{ID: id})
				})
			}
			var said bool
			for _, e := range r.events {
				said = said || e.Kind == api.EventFailed && e.Node == "s1" && strings.Contains(e.Cause, "gone with the job's model")
			}
			var state string
			for _, n := range r.m.Status().Nodes {
				if n.ID == "s1" {
					state = n.State
				}
			}
			if !said || state != "dead" {
				t.Fatalf("the last server dead after the job: said %v (%v), shown %q", said, r.events, state)
			}
			// Only stopped (SIGSTOP), it answers again with the model.
			r.step(func(m *Machine, id uint64) { m.ServerAnswers(id, "s1", "127.0.0.1:2") })
			for _, n := range r.m.Status().Nodes {
				if n.ID == "s1" && n.State != "serving" {
					t.Fatalf("the last server answering again after the job: %q, want serving", n.State)
				}
			}
			r.step(func(m *Machine, id uint64) { m.ServerFailed(id, "s1", "") })
			r.nextJobOn(t, "s2", "127.0.0.1:3")
		})
	}
}
