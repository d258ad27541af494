package keyspace

import (
	"errors"
	"fmt"
)

// SlotBits is log2 of the number of consecutive keys in a slot. A slot is the
// unit of server storage, of copies and of the chain's bookkeeping.
const SlotBits = 6

// SlotSize is the number of consecutive keys in a slot.
const SlotSize = 1 << SlotBits

// UnitBits is log2 of the number of consecutive slots in a placement unit
// (4,096 keys). Beyond the first SpreadSlots slots the ring places units,
// not single slots, so that a dense range reaches each server as runs of
// at least 16 KiB of float32 and forms the store's dense groups there,
// instead of 64-key pieces that cost per piece on both ends
// (docs/design/dataplane.md, "Placement units"). A unit is a whole number
// of the store's dense groups.
const UnitBits = 6

// SpreadSlots is how many slots from key 0 the ring places one by one:
// the first 65,536 keys, where small ids (feature, user and item ids) and
// small tables live, spread over the servers slot by slot.
const SpreadSlots = 1024

// Unit returns the placement unit that holds slot s.
func Unit(s uint64) uint64 { return s >> UnitBits }

// PlacementKey is what the ring hashes to place slot s: the slot itself
// among the first SpreadSlots, its unit beyond (marked by the top bit, so
// that the two kinds never share a key). Every slot of a unit beyond
// SpreadSlots therefore has the same servers.
func PlacementKey(s uint64) uint64 {
	if s < SpreadSlots {
		return s
	}
	return 1<<63 | Unit(s)
}

// ErrUnsorted is returned for a key list that is not strictly increasing.
var ErrUnsorted = errors.New("keys not sorted and unique")

// Slot returns the slot that holds key k.
func Slot(k uint64) uint64 { return k >> SlotBits }

// SlotStart returns the first key of slot s.
func SlotStart(s uint64) uint64 { return s << SlotBits }

// Range is the half-open key interval [Lo, Hi).
type Range struct {
	Lo, Hi uint64
}

// Len returns the number of keys in r.
func (r Range) Len() uint64 {
	if r.Hi <= r.Lo {
		return 0
	}
	return r.Hi - r.Lo
}

// Contains reports whether k lies in r.
func (r Range) Contains(k uint64) bool { return k >= r.Lo && k < r.Hi }

func (r Range) String() string { return fmt.Sprintf("[%d,%d)", r.Lo, r.Hi) }

// CheckSorted returns an error wrapping ErrUnsorted, naming the first
// offending position, unless keys is strictly increasing.
func CheckSorted(keys []uint64) error {
	for i := 1; i < len(keys); i++ {
		if keys[i] <= keys[i-1] {
			return fmt.Errorf("%w: keys[%d]=%d after keys[%d]=%d", ErrUnsorted, i, keys[i], i-1, keys[i-1])
		}
	}
	return nil
}

// Mix64 is a bijective 64-bit finaliser (splitmix64). Placement hashes
// placement keys with it so that neighbours land on unrelated ring points.
func Mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
