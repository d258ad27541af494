package coord

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// passRig drives a Machine through whole passes as fast as it can take
// them: workers ask for work and complete each piece at once, each step's
// Ready saved and advanced. save, when set, sees every save.
type passRig struct {
	tb      testing.TB
	m       *Machine
	id      uint64
	workers int
	// stateful: every completion carries a partition state (lda).
	stateful bool
	save     func(*Save)
	reply    *Reply
}

func newPassRig(tb testing.TB, partitions, workers int, stateful bool, save func(*Save)) *passRig {
	r := &passRig{tb: tb, m: NewMachine(Config{Servers: 1, Workers: workers, Partitions: partitions}, t0), workers: workers,
		stateful: stateful}
	r.step(func(m *Machine, id uint64) { m.Join(id, api.Join{Role: api.RoleServer, ID: "s0", Addr: "127.0.0.1:1"}) })
	for w := range workers {
		r.step(func(m *Machine, id uint64) { m.Join(id, api.Join{Role: api.RoleWorker, ID: fmt.Sprintf("w%d", w)}) })
	}
	r.save = save
	return r
}

// step steps the machine with a request and drives its Readies; it
// returns the request's reply.
func (r *passRig) step(f func(m *Machine, id uint64)) Reply {
	r.id++
	f(r.m, r.id)
	r.reply = nil
	for {
		rd, ok := r.m.Ready()
		if !ok {
			break
		}
		if rd.Save != nil && r.save != nil {
			r.save(rd.Save)
		}
		for i := range rd.Replies {
			if rd.Replies[i].ID == r.id {
				r.reply = &rd.Replies[i]
			}
		}
		if err := r.m.Advance(0); err != nil {
			r.tb.Fatal(err)
		}
	}
	if r.reply == nil {
		r.tb.Fatalf("request %d not answered", r.id)
	}
	if r.reply.Err != nil {
		r.tb.Fatalf("request %d: %v", r.id, r.reply.Err)
	}
	return *r.reply
}

// pass trains pass e: the workers in turn take a piece and complete it.
func (r *passRig) pass(e int) {
	for done := false; !done; {
		for rank := range r.workers {
			g := r.step(func(m *Machine, id uint64) { m.Acquire(id, api.Acquire{Rank: rank, Pass: e}) }).Grant
			if g.Done {
				done = true
				break
			}
			u := api.Update{Rank: rank, Pass: e, Partition: g.Partition, Offset: 10, Complete: true, Lease: g.Lease, HasState: r.stateful}
			head, tail, err := r.m.AllocStates(u)
			if err != nil {
				r.tb.Fatal(err)
			}
			r.step(func(m *Machine, id uint64) { m.Progress(id, u, head, tail) })
		}
	}
}

// TestSaveBoundedInPartitions: what a grant's or a completion's save
// writes does not grow with the number of partitions. Every save wrote
// the whole state, a piece per partition, so a pass cost the square of
// them (docs/design/control.md, "A save costs what changed"); here, two
// passes of 100 and of 4,000 partitions (with partition states, as lda
// keeps, and without) write saves of the same size, but for the digits
// of counters.
func TestSaveBoundedInPartitions(t *testing.T) {
	for _, stateful := range []bool{false, true} {
		largest := map[int]int{}
		for _, parts := range []int{100, 4000} {
			saves, rewrites := 0, 0
			r := newPassRig(t, parts, 2, stateful, nil)
			r.save = func(sv *Save) {
				saves++
				if sv.Rewrite {
					rewrites++
					return
				}
				n := len(sv.State)
				for _, b := range sv.Parts {
					n += len(b)
				}
				largest[parts] = max(largest[parts], n)
			}
			r.pass(0)
			r.pass(1)
			if saves < 4*parts || rewrites != 0 {
				t.Fatalf("stateful %v, %d partitions: %d saves, %d of them rewrites; want a save per grant and per completion, none a rewrite",
					stateful, parts, saves, rewrites)
			}
		}
		t.Logf("stateful %v: the largest save writes %d bytes with 100 partitions, %d with 4,000", stateful, largest[100], largest[4000])
		if largest[4000] > largest[100]+largest[100]/4 {
			t.Errorf("stateful %v: a save writes up to %d bytes with 100 partitions and %d with 4,000: it grows with them",
				stateful, largest[100], largest[4000])
		}
	}
}

// TestSavedRestores: what a store holds after each save of two passes
// restores to the machine's state, through passes begun (no record
// written), retired (none either), partition states replacing a later
// pass's fresh piece's, a rewrite, and a blob saved before records
// existed.
func TestSavedRestores(t *testing.T) {
	var saved Saved
	r := newPassRig(t, 6, 2, true, nil)
	check := func(what string) {
		t.Helper()
		st, _, err := decodeSaved(saved)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		got, _ := json.Marshal(st)
		want, _ := json.Marshal(r.m.st)
		if string(got) != string(want) {
			t.Fatalf("%s: the store restores to\n%s\nthe machine holds\n%s", what, got, want)
		}
	}
	r.save = func(sv *Save) {
		saved.Apply(sv)
		check("after a save")
	}
	r.pass(0)
	// Pass 2 begins while pass 1 is still on (a split's asker may name
	// it): its fresh pieces start from the states as they were, and
	// keep them when pass 1's completions replace the partitions'.
	r.m.pass(2)
	r.m.dirty = true
	r.step(func(m *Machine, id uint64) { m.reply(Reply{ID: id}) })
	r.pass(1)
	if w := r.m.st.Passes[2]; w == nil || slices.Equal(w.Parts[0][0].States, r.m.st.PartStates[0]) {
		t.Fatalf("pass 3's fresh piece of partition 0 should hold the states before pass 2's: %+v, partition %v", w, r.m.st.PartStates[0])
	}
	r.m.rewriteParts()
	r.step(func(m *Machine, id uint64) { m.reply(Reply{ID: id}) })
	if len(saved.Parts) == 0 {
		t.Fatal("a rewrite left no records")
	}

	// A blob that holds the pieces itself, as saved before records.
	inline, err := json.Marshal(r.m.st)
	if err != nil {
		t.Fatal(err)
	}
	m, err := RestoreMachine(r.m.cfg, Saved{State: inline}, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !m.rewrite || len(m.st.Passes) != len(r.m.st.Passes) || !slices.Equal(m.st.PartStates[3], r.m.st.PartStates[3]) {
		t.Fatalf("a blob with its pieces inline restored to passes %v, states %v (rewrite %v)", m.passNumbers(), m.st.PartStates, m.rewrite)
	}
}

// BenchmarkPassSaves: a pass of P partitions (a grant and a completion
// each, and their saves) on the machine alone; "whole" also marshals the
// whole state at every save, as every save did before records (the
// baseline, in the same run), and counts its bytes as what is saved.
func BenchmarkPassSaves(b *testing.B) {
	for _, parts := range []int{1000, 4000} {
		for _, whole := range []bool{false, true} {
			name := fmt.Sprintf("partitions=%d/records", parts)
			if whole {
				name = fmt.Sprintf("partitions=%d/whole", parts)
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				var r *passRig
				bytes := 0
				save := func(sv *Save) {
					if !whole {
						bytes += len(sv.State)
						for _, p := range sv.Parts {
							bytes += len(p)
						}
						return
					}
					blob, err := json.Marshal(r.m.st)
					if err != nil {
						b.Fatal(err)
					}
					bytes += len(blob)
				}
				r = newPassRig(b, parts, 2, false, save)
				for e := 0; b.Loop(); e++ {
					r.pass(e)
				}
				b.ReportMetric(float64(bytes)/float64(b.N), "saved-B/op")
			})
		}
	}
}
