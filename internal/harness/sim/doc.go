// Package sim runs a whole Terrace cluster in one process, in fake time,
// under faults, and checks what must hold: the deterministic simulation.
//
// A Scenario is a cluster's shape (Config), the job its workers run
// (Workload; Counters is the standard one), a Schedule of faults, and the
// Invariants checked at the end. Run simulates it inside a
// testing/synctest bubble: the coordinator, servers and workers are the
// real nodes of package node, each on its own host of a simnet network,
// and fake time moves only when every goroutine is blocked, so a seed
// replays its run. Random draws the seeded schedules of TestSimulation.
//
// Faults are plain values (KillServer, KillServers, JoinServer, Drain, KillWorker,
// Partition, Delay, Drop, SlowWorker, Revoke); a new kind is a type with
// Apply and String built on Cluster's operations. Invariants are one
// method, Check, reading two accounts kept outside the code under test:
// the Book (every push, acknowledgement, clock and read) and Copies (which
// servers hold a complete copy of each slot), which tells an expected loss
// (every copy of a slot gone before a new one was complete) from a bug.
// See docs/design/sim.md.
package sim
