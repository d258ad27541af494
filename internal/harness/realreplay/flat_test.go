package realreplay

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/harness/drill"
)

// fakeCluster records what a flat job does to its machines.
type fakeCluster struct {
	next  int
	calls []string
}

func (c *fakeCluster) StartMachine(drill.Role) (string, error) {
	c.next++
	return fmt.Sprintf("reliable-%d", c.next-1), nil
}
func (c *fakeCluster) Notice(name string) error { return c.did("notice", name) }
func (c *fakeCluster) Kill(name string) error   { return c.did("kill", name) }
func (c *fakeCluster) Drain(name string) error  { return c.did("drain", name) }
func (c *fakeCluster) did(what, name string) error {
	c.calls = append(c.calls, what+" "+name)
	return nil
}

// running returns an elastic job (chains of k) formed with n machines,
// machine-0 to machine-(n-1), each reliable-i in the fake cluster.
func running(t *testing.T, n, k int) (*flat, *fakeCluster) {
	t.Helper()
	f := &flat{held: map[string]*machine{}, elastic: true, k: k, need: 1, servers: n}
	c := &fakeCluster{}
	for range n {
		if _, err := f.start(c); err != nil {
			t.Fatal(err)
		}
	}
	return f, c
}

var t0 = time.Date(2015, 4, 10, 0, 0, 0, 0, time.UTC)

// TestElasticKill: an elastic job loses a machine killed while another
// holds the state and goes on (only that machine is killed); the last
// machine's kill takes the state: every process is killed, the job is
// down, and it restarts (ready) once a machine not on notice is held,
// on those machines, not waiting for its footprint.
func TestElasticKill(t *testing.T) {
	f, c := running(t, 3, 2)
	for i, alias := range []string{"machine-0", "machine-1"} {
		lost, err := f.kill(c, alias, t0.Add(time.Duration(i)*time.Minute), true)
		if err != nil || lost || f.down {
			t.Fatalf("kill %s with others holding the state: lost %v, down %v, %v", alias, lost, f.down, err)
		}
	}
	if want := []string{"kill reliable-0", "kill reliable-1"}; !slices.Equal(c.calls, want) {
		t.Errorf("calls %q, want %q", c.calls, want)
	}
	// Two machines come up while the last one runs: they join it.
	for range 2 {
		if _, err := f.start(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.notice(c, "machine-4"); err != nil {
		t.Fatal(err)
	}
	c.calls = nil
	// The last machine not on notice goes: the noticed one does not hold
	// the job up, as it goes too.
	if lost, err := f.kill(c, "machine-2", t0.Add(time.Hour), true); err != nil || lost || f.down {
		t.Fatalf("kill with machines still running: lost %v, down %v, %v", lost, f.down, err)
	}
	for i, alias := range []string{"machine-3", "machine-4"} {
		lost, err := f.kill(c, alias, t0.Add(2*time.Hour+time.Duration(i)*time.Minute), true)
		if err != nil {
			t.Fatal(err)
		}
		if last := alias == "machine-4"; lost != last || f.down != last {
			t.Fatalf("kill %s: lost %v, down %v; want the state lost with the last machine only", alias, lost, f.down)
		}
	}
	if f.ready() != nil {
		t.Errorf("down with no machine held: ready %v", f.ready())
	}
	// Machines bought again: the job restarts on the one not on notice.
	for range 2 {
		if _, err := f.start(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.notice(c, "machine-6"); err != nil {
		t.Fatal(err)
	}
	if got := f.ready(); !slices.Equal(got, []string{"machine-5"}) {
		t.Errorf("ready %v, want [machine-5]", got)
	}
}

// TestElasticKilledAtOnce: k machines killed in the same instant take
// every copy of some slots (chains of k): the job's state is lost,
// though a machine still runs, and every process is killed; the same
// kills at two instants lose nothing.
func TestElasticKilledAtOnce(t *testing.T) {
	for _, apart := range []time.Duration{0, time.Second} {
		f, c := running(t, 3, 2)
		if lost, _ := f.kill(c, "machine-0", t0, true); lost {
			t.Fatalf("the first kill lost the state")
		}
		lost, err := f.kill(c, "machine-1", t0.Add(apart), true)
		if err != nil {
			t.Fatal(err)
		}
		if want := apart == 0; lost != want || f.down != want {
			t.Errorf("two kills %v apart: lost %v, down %v, want %v", apart, lost, f.down, want)
		}
		if apart == 0 && !slices.Contains(c.calls, "kill reliable-2") {
			t.Errorf("the survivor runs on after the state was lost: %q", c.calls)
		}
		if apart == 0 && !slices.Equal(f.ready(), []string{"machine-2"}) {
			t.Errorf("restart on %v, want the survivor machine-2", f.ready())
		}
	}
	// Chains of one (a calibration with k = 1): any kill
	// loses the machine's slots.
	f, c := running(t, 2, 2)
	f.k = 1
	if lost, _ := f.kill(c, "machine-0", t0, true); !lost {
		t.Errorf("chains of one: a kill lost nothing")
	}
}

// TestElasticDrain: a noticed machine drains (the notice reaches its
// processes); a released one drains while another holds the state, and
// the last one's release takes the state (the last server cannot
// drain), but not once the job is over. Checkpoint-restart ignores the
// notice and loses its state with any kill.
func TestElasticDrain(t *testing.T) {
	f, c := running(t, 2, 2)
	if err := f.notice(c, "machine-0"); err != nil {
		t.Fatal(err)
	}
	if lost, err := f.drain(c, "machine-1", true); err != nil || lost {
		t.Fatalf("release with a machine holding the state: lost %v, %v", lost, err)
	}
	if want := []string{"notice reliable-0", "drain reliable-1"}; !slices.Equal(c.calls, want) {
		t.Errorf("calls %q, want %q", c.calls, want)
	}
	if lost, _ := f.drain(c, "machine-0", true); !lost || !f.down {
		t.Errorf("release of the last machine: lost %v, down %v", lost, f.down)
	}
	f, c = running(t, 1, 2)
	f.over = true
	if lost, _ := f.drain(c, "machine-0", true); lost || !slices.Equal(c.calls, []string{"drain reliable-0"}) {
		t.Errorf("the last machine given back after the job: lost %v, calls %q", lost, c.calls)
	}

	ck, c := running(t, 2, 2)
	ck.elastic, ck.need = false, 2
	if err := ck.notice(c, "machine-0"); err != nil || len(c.calls) != 0 {
		t.Errorf("checkpoint-restart noticed: %q, %v", c.calls, err)
	}
	if lost, _ := ck.kill(c, "machine-0", t0, true); !lost || !ck.down {
		t.Errorf("checkpoint-restart: a kill lost nothing")
	}
	if ck.ready() != nil {
		t.Errorf("checkpoint-restart restarts on %v, short of its footprint", ck.ready())
	}
}

// TestElasticFormation: before the cluster has formed, losing a machine
// it forms with stops it (the coordinator would wait for it for good),
// while a machine waiting to join goes without harm.
func TestElasticFormation(t *testing.T) {
	f, c := running(t, 2, 2)
	if _, err := f.start(c); err != nil { // machine-2 waits for the formation
		t.Fatal(err)
	}
	if lost, _ := f.kill(c, "machine-2", t0, false); lost {
		t.Errorf("a machine waiting to join lost the state")
	}
	if lost, _ := f.kill(c, "machine-0", t0.Add(time.Second), false); !lost || !f.down {
		t.Errorf("a machine of the formation lost before it formed: lost %v, down %v", lost, f.down)
	}
}

// TestRollToInsideFirstPass: a checkpoint taken inside the first pass (a
// notice before any pass ended) completes no pass but is resumed; only a
// directory with none committed starts the job from scratch. The restart
// took such a checkpoint for none and trained again from scratch.
func TestRollToInsideFirstPass(t *testing.T) {
	f := &flat{}
	f.rollTo(drill.Saved{Seq: 1, Pass: -1, Inside: true, ByRank: map[int]int64{0: 5}})
	if f.resumed == nil || f.passes != 0 || !f.inside {
		t.Fatalf("inside the first pass: resumed %v, passes %d, inside %v; want resumed, 0, inside", f.resumed, f.passes, f.inside)
	}
	f.rollTo(drill.Saved{Pass: -1, ByRank: map[int]int64{}})
	if f.resumed != nil || f.passes != 0 {
		t.Fatalf("nothing committed: resumed %v, passes %d; want from scratch", f.resumed, f.passes)
	}
}
