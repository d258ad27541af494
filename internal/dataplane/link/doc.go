// Package link emulates a machine's network link: a token bucket per
// direction, shared by every connection of the machine, that paces reads
// and writes, so that on one host, where every node shares loopback, a
// "reliable" or "transient" machine has the bandwidth the planner assumes
// (docs/design/tiers.md, "Emulated links").
package link
