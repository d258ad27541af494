// Package tlsnet is a transport.Network that speaks mutual TLS over
// another Network: every connection a node dials or accepts, on the data
// plane, for replication and bulk streams and for the coordinator's HTTP
// API, presents the node's certificate and requires the peer's, signed by
// the cluster CA.
//
// Between two Terrace nodes (ALPN terrace-records/1) the stream moves,
// after the handshake, in records of the package's own: TLS 1.3's record
// protection with 256 KiB records and keys from the TLS exporter, sealed
// from and opened into the caller's buffers (record.go). Any other client
// stays on crypto/tls.
package tlsnet
