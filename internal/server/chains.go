package server

import (
	"slices"

	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/keyspace"
)

// chains says, for the slots a server heads, which other servers must hold
// them: the next servers of the ring's chain, and any joining server that
// will hold the slot once it is on the ring.
type chains struct {
	version uint64
	k       int
	ring    *ring.Map // routing: heads
	final   *ring.Map // the ring with the joining servers in and the leaving out
	// moving lists the joining and leaving servers: while there are any,
	// a slot's members include its chain on the final ring.
	moving []string
	// backup is the BackupPS ring (nil without one): a slot's head also
	// streams it to the slot's chain of k there, asynchronously (AckBulk,
	// docs/design/tiers.md). Those members are not successors: a
	// rebuild owes them no copy, and a switch that makes one a successor
	// copies it every slot.
	backup *ring.Map
}

func newChains(l *layout.Layout, rm *ring.Map) (chains, error) {
	final, err := l.Final()
	if err != nil {
		return chains{}, err
	}
	backup, err := l.BackupRing()
	if err != nil {
		return chains{}, err
	}
	ch := chains{version: l.Version, k: l.K(), ring: rm, final: final, moving: slices.Clone(l.Leaving), backup: backup}
	for _, j := range l.Joining {
		ch.moving = append(ch.moving, j.ID)
	}
	return ch, nil
}

func (ch chains) replicates() bool {
	return ch.ring != nil && (ch.k > 1 || len(ch.moving) > 0 || ch.backup != nil)
}

// backups appends to dst the BackupPS that slot sl streams to.
func (ch chains) backups(sl uint64, dst []ring.Server, scratch []int) ([]ring.Server, []int) {
	if ch.backup == nil {
		return dst, scratch
	}
	scratch = ch.backup.Chain(sl, ch.k, scratch)
	for _, i := range scratch {
		dst = append(dst, ch.backup.Servers[i])
	}
	return dst, scratch
}

// isBackup reports whether server id is a BackupPS.
func (ch chains) isBackup(id string) bool { return ch.backup != nil && ch.backup.Index(id) >= 0 }

// successors appends to dst the servers other than the head that must
// hold slot sl.
func (ch chains) successors(sl uint64, dst []ring.Server, scratch []int) ([]ring.Server, []int) {
	dst = dst[:0]
	if ch.ring == nil {
		return dst, scratch
	}
	scratch = ch.ring.Chain(sl, ch.k, scratch)
	head := ch.ring.Servers[scratch[0]].ID
	for _, i := range scratch[1:] {
		dst = append(dst, ch.ring.Servers[i])
	}
	if len(ch.moving) > 0 {
		// The servers that will hold the slot once the joiners are in and
		// the leavers out: a joiner, or the new holder of a leaver's slot.
		scratch = ch.final.Chain(sl, ch.k, scratch)
		for _, i := range scratch {
			if srv := ch.final.Servers[i]; srv.ID != head && !contains(dst, srv.ID) {
				dst = append(dst, srv)
			}
		}
	}
	return dst, scratch
}

// group is what one peer must receive of a push.
type group struct {
	peer  ring.Server
	items []item
}

// groups splits the keys of a push by the servers that must hold them.
func (ch chains) groups(t *tableState, ks keyspace.Keys) map[string]*group {
	groups := map[string]*group{}
	var succ []ring.Server
	var scratch []int
	for sp := range ks.Spans() {
		succ, scratch = ch.successors(sp.Slot, succ, scratch)
		succ, scratch = ch.backups(sp.Slot, succ, scratch)
		for _, p := range succ {
			g := groups[p.ID]
			if g == nil {
				g = &group{peer: p, items: []item{{t: t}}}
				groups[p.ID] = g
			}
			g.items[0].keys.Add(sp)
		}
	}
	return groups
}

func contains(ps []ring.Server, id string) bool {
	for _, p := range ps {
		if p.ID == id {
			return true
		}
	}
	return false
}
