package data

import "fmt"

// Part is one contiguous partition [Lo, Hi) of the rows of a data set.
// Data is cut into many more parts than there are workers, and work moves
// between workers by moving parts, so Part is a small value that can be
// copied into leases and messages.
type Part struct {
	ID     int
	Lo, Hi int
}

// Len returns the number of rows in p.
func (p Part) Len() int { return p.Hi - p.Lo }

func (p Part) String() string { return fmt.Sprintf("part %d [%d,%d)", p.ID, p.Lo, p.Hi) }

// Partition cuts the rows [0, n) into parts contiguous partitions with IDs
// 0..parts-1 in row order. Sizes differ by at most one, the larger parts
// coming first. When parts exceeds n the trailing parts are empty (Lo ==
// Hi), so that the number of parts, and with it every part's ID, depends
// only on the caller's choice and not on the data. It panics if n < 0 or
// parts < 1.
func Partition(n, parts int) []Part {
	if n < 0 || parts < 1 {
		panic(fmt.Sprintf("data.Partition(%d, %d): want n >= 0 and parts >= 1", n, parts))
	}
	q, r := n/parts, n%parts
	ps := make([]Part, parts)
	lo := 0
	for i := range ps {
		hi := lo + q
		if i < r {
			hi++
		}
		ps[i] = Part{ID: i, Lo: lo, Hi: hi}
		lo = hi
	}
	return ps
}

// Order returns p's rows shuffled for epoch. The order depends only on
// (seed, epoch, p.ID), so that a worker resuming another's partition at an
// offset continues the same sequence.
func (p Part) Order(seed uint64, epoch int) []int {
	rows := make([]int, 0, p.Len())
	for i := p.Lo; i < p.Hi; i++ {
		rows = append(rows, i)
	}
	Shuffle(rows, seed+uint64(epoch)*7919+uint64(p.ID)*104729)
	return rows
}
