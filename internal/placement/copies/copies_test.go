package copies

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/table"
)

// naive is the account kept slot by slot, for the first SpreadSlots
// slots, by the rules Account keeps by arcs.
type naive struct {
	ready      bool
	job        uint64
	empty      bool
	holders    [keyspace.SpreadSlots][]string
	placements map[uint64]*layout.Layout
	latest     *layout.Layout
	lost       map[uint64]bool
	maps       map[*layout.Layout][2]*ring.Map // the rings of each layout
}

// members returns the members of slot sl's chains under l.
func (n *naive) members(l *layout.Layout, sl uint64) []string {
	m, ok := n.maps[l]
	if !ok {
		m[0], _ = l.Ring()
		if len(l.Joining) > 0 || len(l.Leaving) > 0 {
			m[1], _ = l.Final()
		}
		n.maps[l] = m
	}
	rm, final := m[0], m[1]
	var out []string
	for _, i := range rm.Chain(sl, l.K(), nil) {
		out = append(out, rm.Servers[i].ID)
	}
	if final != nil {
		for _, i := range final.Chain(sl, l.K(), nil) {
			if id := final.Servers[i].ID; !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	slices.Sort(out)
	return out
}

func placed(l *layout.Layout, id string) bool {
	has := func(s ring.Server) bool { return s.ID == id }
	return slices.ContainsFunc(l.Servers, has) || slices.ContainsFunc(l.Joining, has)
}

func (n *naive) layout(l *layout.Layout) {
	fresh := !n.ready || n.empty || n.job != l.Job
	n.placements[l.Version], n.latest = l, l
	n.members(l, 0)
	rm := n.maps[l][0]
	for sl := range uint64(keyspace.SpreadSlots) {
		m := n.members(l, sl)
		if fresh {
			n.holders[sl] = m
			continue
		}
		h := slices.DeleteFunc(slices.Clone(n.holders[sl]), func(id string) bool { return !slices.Contains(m, id) })
		if len(h) == 0 {
			h = []string{rm.Servers[rm.SlotOwner(sl)].ID}
			n.lost[sl] = true
		}
		n.holders[sl] = h
	}
	n.ready = n.ready || l.Ready
	n.job, n.empty = l.Job, len(l.Tables) == 0
}

func (n *naive) restarted(id string) {
	rm := n.maps[n.latest][0]
	for sl := range uint64(keyspace.SpreadSlots) {
		h := slices.DeleteFunc(slices.Clone(n.holders[sl]), func(h string) bool { return h == id })
		if len(h) == 0 {
			if len(n.holders[sl]) > 0 {
				n.lost[sl] = true
			}
			if head := rm.Servers[rm.SlotOwner(sl)].ID; head != id {
				h = []string{head}
			}
		}
		n.holders[sl] = h
	}
}

func (n *naive) rebuilt(id string, version uint64) {
	l := n.placements[version]
	if l == nil || !placed(n.latest, id) {
		return
	}
	rm := n.maps[l][0]
	for sl := range uint64(keyspace.SpreadSlots) {
		if rm.Servers[rm.SlotOwner(sl)].ID != id || !slices.Contains(n.holders[sl], id) {
			continue
		}
		now := n.members(n.latest, sl)
		for _, m := range n.members(l, sl) {
			if slices.Contains(now, m) && !slices.Contains(n.holders[sl], m) {
				n.holders[sl] = append(n.holders[sl], m)
			}
		}
		slices.Sort(n.holders[sl])
	}
}

// TestArcsAgreeWithSlots: the account by arcs agrees, slot by slot, with
// the same rules kept per slot, over random layouts (failures, joins,
// drains) and rebuild reports, and a saved and restored account goes on
// agreeing.
func TestArcsAgreeWithSlots(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 1))
			a, n := New(), &naive{placements: map[uint64]*layout.Layout{}, lost: map[uint64]bool{}, maps: map[*layout.Layout][2]*ring.Map{}}
			l := &layout.Layout{Version: 1, Replication: 1 + r.IntN(3), VNodes: 16}
			next := 0
			add := func() ring.Server {
				next++
				return ring.Server{ID: fmt.Sprint("s", next)}
			}
			for range 4 {
				l.Servers = append(l.Servers, add())
			}
			step := func() {
				l.Version++
				c := *l
				c.Servers, c.Joining, c.Leaving = slices.Clone(l.Servers), slices.Clone(l.Joining), slices.Clone(l.Leaving)
				n.layout(&c)
				loss, err := a.Layout(&c)
				if err != nil {
					t.Fatal(err)
				}
				for _, sl := range SpreadSlots(loss.Arcs) {
					if !n.lost[sl] {
						t.Fatalf("v%d: slot %d reported lost, the slots' account has it held", c.Version, sl)
					}
				}
			}
			step()
			l.Ready, l.Tables = true, []layout.Table{{ID: 1, Spec: table.Spec{Name: "w", Width: 1}}}
			step()
			for i := range 60 {
				switch k := r.IntN(10); {
				case k < 3 && len(l.Servers)-len(l.Leaving) > 1: // a failure
					j := r.IntN(len(l.Servers))
					l.Servers = slices.Delete(l.Servers, j, j+1)
					l.Leaving = slices.DeleteFunc(l.Leaving, func(id string) bool { return !placed(l, id) })
					step()
				case k < 5 && len(l.Joining) == 0 && len(l.Leaving) == 0: // a join or a drain begins
					if r.IntN(2) == 0 || len(l.Servers) < 3 {
						l.Joining = []ring.Server{add()}
					} else {
						l.Leaving = []string{l.Servers[r.IntN(len(l.Servers))].ID}
					}
					step()
				case k < 6 && (len(l.Joining) > 0 || len(l.Leaving) > 0): // ... and ends
					l.Servers = append(slices.DeleteFunc(l.Servers, func(s ring.Server) bool { return slices.Contains(l.Leaving, s.ID) }), l.Joining...)
					l.Joining, l.Leaving = nil, nil
					step()
				case k < 7 && len(l.Joining) == 0 && len(l.Leaving) == 0 && len(l.Servers) > 1: // a restart: the server joins again
					j := r.IntN(len(l.Servers))
					srv := l.Servers[j]
					n.restarted(srv.ID)
					loss, err := a.Restarted(srv.ID)
					if err != nil {
						t.Fatal(err)
					}
					for _, sl := range SpreadSlots(loss.Arcs) {
						if !n.lost[sl] {
							t.Fatalf("restart of %s: slot %d reported lost, the slots' account has it held", srv.ID, sl)
						}
					}
					l.Servers, l.Joining = slices.Delete(l.Servers, j, j+1), []ring.Server{srv}
					step()
				default: // a rebuild report, for this layout or an earlier one
					v := l.Version - uint64(r.IntN(3))
					all := append(slices.Clone(l.Servers), l.Joining...)
					id := all[r.IntN(len(all))].ID
					n.rebuilt(id, v)
					if _, err := a.Rebuilt(id, v); err != nil {
						t.Fatal(err)
					}
				}
				if i%7 == 0 {
					s, err := a.Save()
					if err != nil {
						t.Fatal(err)
					}
					if a, err = Restore(s); err != nil {
						t.Fatal(err)
					}
				}
				for sl := range uint64(keyspace.SpreadSlots) {
					if got := a.Holders(ring.SlotHash(sl)); !slices.Equal(got, n.holders[sl]) {
						t.Fatalf("step %d (v%d): slot %d held by %v, the slots' account says %v", i, l.Version, sl, got, n.holders[sl])
					}
				}
			}
		})
	}
}
