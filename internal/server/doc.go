// Package server is a Terrace parameter server: it stores the key slots the
// range map gives it, applies pushes with each table's update rule, and
// answers pulls within each table's consistency bound.
//
// Its decisions are pure types without I/O, locks, goroutines or clocks,
// tested by the scenario files in testdata: consistency (clocks and BSP
// deferral), dedup and heldPushes (which pushes the server holds, and
// where), chains and peerSync (who must hold a slot, and which slots a peer
// holds in step), peerQueue (a replication stream's rounds and its
// acknowledgement policy), and ledger (a BackupPS's record of the pushes
// its ActivePS may acknowledge that it does not hold yet: what a fallback
// loses). Server drives them from its connection
// goroutines, its replicators' goroutines and its tasks; Server's comment
// gives the lock order. docs/design/server.md explains the whole.
package server
