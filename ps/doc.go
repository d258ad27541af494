// Package ps is the worker's API to the parameter server: asynchronous
// Push, Pull and PushPull on sorted key lists and key ranges of named
// tables, each returning a Future, and Clock for the consistency models.
//
// Values are sent straight from the caller's slices and received straight
// into them: a slice passed to Push or Pull must not be touched until its
// Future is done.
//
// EachPartition trains the data partitions leased to the worker, pass by
// pass, with one loop that every application shares: the application
// gives a minibatch step, and the loop records progress only for what the
// servers acknowledged, moves partition state with its rows, drains, and
// stops early when the tail of its lease is given to another worker
// (docs/design/partloop.md). With Reassign, workers tell a few peers
// their progress (Peers) and a worker with nothing left to take in a
// pass takes the tail of a slow peer's lease through the same split
// (docs/design/stragglers.md).
package ps
