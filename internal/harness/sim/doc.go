// Package sim holds the deterministic whole-cluster simulation: a
// coordinator, servers and workers in one process, on the in-memory network
// of package simnet, in testing/synctest's fake time, under seeded random
// fault schedules, checked for exactly-once pushes, the SSP staleness bound
// and training that finishes. It is all tests (sim_test.go); see
// docs/design/sim.md.
package sim
