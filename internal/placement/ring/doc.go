// Package ring places key slots on servers by consistent hashing with
// virtual nodes, and records the placement as a versioned range map whose
// epoch travels on every data message.
package ring
