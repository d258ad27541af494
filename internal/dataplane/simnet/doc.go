// Package simnet is an in-memory network for whole-cluster simulations
// under testing/synctest: named hosts, listeners by address, connections
// made of two byte streams with a per-link delay and a bounded buffer,
// deadlines, and faults (crashed hosts, partitions, reset connections,
// latency spikes). Every wait blocks on a channel or a timer, so a
// goroutine waiting on the network is durably blocked in synctest's sense
// and fake time moves on to the next delivery or deadline.
package simnet
