// Package peernet carries workers' progress messages (ps.Peers) between
// worker processes: each worker listens on a peer port announced in its
// join, and sends length-prefixed frames over the node's
// transport.Network, best effort, never blocking the training loop
// (docs/design/stragglers.md).
package peernet
