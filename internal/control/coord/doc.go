// Package coord is the coordinator: it admits servers and workers, keeps
// the tables and the range map and publishes them as a versioned layout,
// leases pieces of data partitions to workers, and orchestrates
// checkpoints.
//
// Its decisions are a state machine without I/O (Machine), in the shape
// of etcd's raft: events in, with the time as an input, and out a Ready
// that says what to save and then what to publish. The Coordinator drives
// it: it saves outside any lock, then publishes and replies, and serves
// the HTTP API of package api (docs/design/control.md).
package coord
