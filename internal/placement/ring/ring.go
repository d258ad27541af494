package ring

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/terrace-ml/terrace/internal/placement/tier"
	"github.com/terrace-ml/terrace/keyspace"
)

// DefaultVNodes is the number of virtual nodes per server. With 128 points a
// server's share of the slots stays within about 10% of the mean for small
// clusters.
const DefaultVNodes = 128

// ErrNoServers is returned when a map is built without servers.
var ErrNoServers = errors.New("ring: no servers")

// Server is a server's identity and data-plane address, and the machine
// it runs on with that machine's class (issue 11). Placement hashes the ID
// only: the machine and class never move a slot.
type Server struct {
	ID      string     `json:"id"`
	Addr    string     `json:"addr"`
	Machine string     `json:"machine,omitempty"`
	Class   tier.Class `json:"class,omitempty"`
}

// Map is one version of the placement of slots on servers. It is immutable.
type Map struct {
	Epoch   uint64   `json:"epoch"`
	Servers []Server `json:"servers"`
	VNodes  int      `json:"vnodes"`

	points []point // sorted by hash
}

type point struct {
	hash   uint64
	server int
}

// New builds the map for servers at epoch. vnodes <= 0 means DefaultVNodes.
// The placement depends only on the servers' IDs, so every node that builds
// the map from the same list agrees on it, and adding or removing a server
// moves only the slots adjacent to its points.
func New(epoch uint64, servers []Server, vnodes int) (*Map, error) {
	if len(servers) == 0 {
		return nil, ErrNoServers
	}
	if vnodes <= 0 {
		vnodes = DefaultVNodes
	}
	seen := make(map[string]bool, len(servers))
	for _, s := range servers {
		if s.ID == "" {
			return nil, errors.New("ring: server with empty ID")
		}
		if seen[s.ID] {
			return nil, fmt.Errorf("ring: duplicate server ID %q", s.ID)
		}
		seen[s.ID] = true
	}
	m := &Map{Epoch: epoch, Servers: slices.Clone(servers), VNodes: vnodes}
	m.points = make([]point, 0, len(servers)*vnodes)
	for i, s := range servers {
		base := idHash(s.ID)
		for v := 0; v < vnodes; v++ {
			m.points = append(m.points, point{hash: keyspace.Mix64(base + uint64(v)), server: i})
		}
	}
	slices.SortFunc(m.points, func(a, b point) int {
		if a.hash != b.hash {
			if a.hash < b.hash {
				return -1
			}
			return 1
		}
		return a.server - b.server
	})
	return m, nil
}

// Rebuild fills the unexported lookup tables after m was decoded from JSON.
func (m *Map) Rebuild() (*Map, error) { return New(m.Epoch, m.Servers, m.VNodes) }

func idHash(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

// SlotHash is where slot s lies on the ring: the hash of its placement
// key. Slots whose hashes lie between the same two points of a map have
// the same chain there.
func SlotHash(s uint64) uint64 { return keyspace.Mix64(keyspace.PlacementKey(s)) }

// first returns the index in m.points of the first virtual node clockwise
// from the hash of slot s's placement key.
func (m *Map) first(s uint64) int { return m.firstAt(SlotHash(s)) }

// firstAt returns the index in m.points of the first virtual node
// clockwise from hash h.
func (m *Map) firstAt(h uint64) int {
	i, _ := slices.BinarySearchFunc(m.points, h, func(p point, h uint64) int {
		return cmp.Compare(p.hash, h)
	})
	if i == len(m.points) {
		i = 0
	}
	return i
}

// SlotOwner returns the index in m.Servers of the server that owns slot s:
// the first virtual node clockwise from the slot's hash.
func (m *Map) SlotOwner(s uint64) int {
	if len(m.Servers) == 1 {
		return 0
	}
	return m.points[m.first(s)].server
}

// Owner returns the index of the server that owns key k.
func (m *Map) Owner(k uint64) int { return m.SlotOwner(keyspace.Slot(k)) }

// Index returns the index of the server with id, or -1.
func (m *Map) Index(id string) int {
	for i, s := range m.Servers {
		if s.ID == id {
			return i
		}
	}
	return -1
}

// OwnedRuns calls fn, in key order, for each maximal run [lo,hi) of keys in
// r whose slots server owns. Both sender and receiver of a range message use
// it, so that they agree on which values the message holds.
func (m *Map) OwnedRuns(r keyspace.Range, server int, fn func(lo, hi uint64)) {
	if r.Len() == 0 {
		return
	}
	runLo, inRun := uint64(0), false
	for s, next := keyspace.Slot(r.Lo), uint64(0); s <= keyspace.Slot(r.Hi-1); s = next {
		// Slot by slot, or unit by unit where units are placed whole.
		next = s + 1
		if s >= keyspace.SpreadSlots {
			next = (keyspace.Unit(s) + 1) << keyspace.UnitBits
		}
		lo := max(keyspace.SlotStart(s), r.Lo)
		if m.SlotOwner(s) == server {
			if !inRun {
				runLo, inRun = lo, true
			}
			continue
		}
		if inRun {
			fn(runLo, lo)
			inRun = false
		}
	}
	if inRun {
		fn(runLo, r.Hi)
	}
}

// Bounds returns the hashes of the map's points, in order, each once:
// the slots whose hashes lie in (b[i-1], b[i]] have one chain, and those
// above the last bound or up to the first another.
func (m *Map) Bounds() []uint64 {
	out := make([]uint64, 0, len(m.points))
	for _, p := range m.points {
		if n := len(out); n == 0 || out[n-1] != p.hash {
			out = append(out, p.hash)
		}
	}
	return out
}

// Chain appends to dst the indexes of the k servers that hold slot s: the
// owner (the head), then the next distinct servers clockwise. When the
// head leaves the ring, its slots fall to the next of these, which already
// holds them. Fewer than k are returned when the ring has fewer servers.
func (m *Map) Chain(s uint64, k int, dst []int) []int { return m.ChainAt(SlotHash(s), k, dst) }

// ChainAt is Chain for the slots whose hash (SlotHash) is h.
func (m *Map) ChainAt(h uint64, k int, dst []int) []int {
	dst = dst[:0]
	k = min(k, len(m.Servers))
	if len(m.Servers) == 1 {
		return append(dst, 0)
	}
	i := m.firstAt(h)
	if k <= 1 {
		return append(dst, m.points[i].server)
	}
	for n := 0; len(dst) < k && n < len(m.points); n++ {
		srv := m.points[(i+n)%len(m.points)].server
		if !slices.Contains(dst, srv) {
			dst = append(dst, srv)
		}
	}
	return dst
}
