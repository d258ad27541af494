package ring

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/terrace-ml/terrace/keyspace"
)

func servers(n int) []Server {
	s := make([]Server, n)
	for i := range s {
		s[i] = Server{ID: fmt.Sprintf("s%d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 7000+i)}
	}
	return s
}

func TestSmallKeysSpread(t *testing.T) {
	m, err := New(1, servers(4), 0)
	if err != nil {
		t.Fatal(err)
	}
	// Keys 0..64K: an equal split of the uint64 space would put all of them on one server.
	count := make([]int, 4)
	for k := uint64(0); k < 1<<16; k++ {
		count[m.Owner(k)]++
	}
	for i, c := range count {
		if c < (1<<16)/4/2 || c > (1<<16)/4*2 {
			t.Errorf("server %d holds %d of %d small keys: %v", i, c, 1<<16, count)
		}
	}
}

func TestBalance(t *testing.T) {
	const slots = 200000
	for _, n := range []int{2, 3, 8} {
		m, _ := New(1, servers(n), 0)
		count := make([]int, n)
		for s := uint64(0); s < slots; s++ {
			count[m.SlotOwner(s)]++
		}
		mean := float64(slots) / float64(n)
		for i, c := range count {
			if d := float64(c)/mean - 1; d > 0.25 || d < -0.25 {
				t.Errorf("n=%d: server %d holds %d slots, mean %.0f", n, i, c, mean)
			}
		}
	}
}

func TestMinimalMovement(t *testing.T) {
	const slots = 100000
	a, _ := New(1, servers(4), 0)
	b, _ := New(2, servers(5), 0)
	moved := 0
	for s := uint64(0); s < slots; s++ {
		oa, ob := a.Servers[a.SlotOwner(s)].ID, b.Servers[b.SlotOwner(s)].ID
		if oa != ob {
			if ob != "s4" {
				t.Fatalf("slot %d moved from %s to %s, not to the new server", s, oa, ob)
			}
			moved++
		}
	}
	if f := float64(moved) / slots; f < 0.1 || f > 0.3 {
		t.Errorf("adding a fifth server moved %.2f of the slots, want about 0.2", f)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	m, _ := New(7, servers(3), 16)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var d Map
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	r, err := d.Rebuild()
	if err != nil {
		t.Fatal(err)
	}
	for k := uint64(0); k < 10000; k += 7 {
		if m.Owner(k) != r.Owner(k) {
			t.Fatalf("key %d: owner %d before, %d after round trip", k, m.Owner(k), r.Owner(k))
		}
	}
	if r.Epoch != 7 {
		t.Fatalf("epoch %d", r.Epoch)
	}
}

func TestOwnedRunsPartition(t *testing.T) {
	m, _ := New(1, servers(3), 0)
	// Both ends inside a unit, over a couple of hundred units.
	r := keyspace.Range{Lo: 1000, Hi: 200_003}
	covered := make([]int, r.Hi)
	for s := range m.Servers {
		prev := uint64(0)
		m.OwnedRuns(r, s, func(lo, hi uint64) {
			if lo < prev || hi <= lo {
				t.Fatalf("server %d: run [%d,%d) after %d", s, lo, hi, prev)
			}
			prev = hi
			for k := lo; k < hi; k++ {
				if m.Owner(k) != s {
					t.Fatalf("key %d in run of server %d, owned by %d", k, s, m.Owner(k))
				}
				covered[k]++
			}
		})
	}
	for k := r.Lo; k < r.Hi; k++ {
		if covered[k] != 1 {
			t.Fatalf("key %d covered %d times", k, covered[k])
		}
	}
}

// TestUnitsPlacedWhole: beyond the first keyspace.SpreadSlots slots every
// slot of a placement unit has the same chain, so a dense range keeps
// 1,024-key runs on one server; below, the slots of a unit spread over
// the servers as single slots do.
func TestUnitsPlacedWhole(t *testing.T) {
	m, _ := New(1, servers(4), 0)
	owners := map[int]bool{}
	for s := range uint64(16) { // unit 0, among the spread slots
		owners[m.SlotOwner(s)] = true
	}
	if len(owners) < 2 {
		t.Errorf("the first 16 slots all on server %v: small ids must spread", owners)
	}
	units := map[int]int{}
	for u := uint64(keyspace.SpreadSlots >> keyspace.UnitBits); u < 4000; u++ {
		first := u << keyspace.UnitBits
		chain := m.Chain(first, 2, nil)
		for s := first + 1; s < first+1<<keyspace.UnitBits; s++ {
			if got := m.Chain(s, 2, nil); !slices.Equal(got, chain) {
				t.Fatalf("slot %d of unit %d: chain %v, the unit's first slot %v", s, u, got, chain)
			}
		}
		units[chain[0]]++
	}
	for srv, n := range units {
		if n < 4000/4/2 || n > 4000/4*2 {
			t.Errorf("server %d heads %d of the units, far from an even share: %v", srv, n, units)
		}
	}
}

func TestRejectsBadServers(t *testing.T) {
	if _, err := New(1, nil, 0); err != ErrNoServers {
		t.Errorf("no servers: %v", err)
	}
	if _, err := New(1, []Server{{ID: "a"}, {ID: "a"}}, 0); err == nil {
		t.Error("duplicate IDs accepted")
	}
}

func TestChainFailover(t *testing.T) {
	all := servers(5)
	m, _ := New(1, all, 0)
	without := append(append([]Server(nil), all[:2]...), all[3:]...) // s2 leaves
	m2, _ := New(2, without, 0)
	var chain []int
	for s := uint64(0); s < 20000; s++ {
		chain = m.Chain(s, 3, chain)
		if len(chain) != 3 || chain[0] != m.SlotOwner(s) || chain[0] == chain[1] || chain[1] == chain[2] || chain[0] == chain[2] {
			t.Fatalf("slot %d: chain %v", s, chain)
		}
		if m.Servers[chain[0]].ID == "s2" {
			// The slot's next server takes it over, and it had a copy.
			if got := m2.Servers[m2.SlotOwner(s)].ID; got != m.Servers[chain[1]].ID {
				t.Fatalf("slot %d: head s2 left; new head %s, want its successor %s", s, got, m.Servers[chain[1]].ID)
			}
		}
	}
	one, _ := New(1, all[:1], 0)
	if c := one.Chain(7, 2, nil); len(c) != 1 {
		t.Fatalf("one server, k=2: chain %v", c)
	}
}
