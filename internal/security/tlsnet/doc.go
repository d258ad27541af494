// Package tlsnet is a transport.Network that speaks mutual TLS over
// another Network: every connection a node dials or accepts, on the data
// plane, for replication and bulk streams and for the coordinator's HTTP
// API, presents the node's certificate and requires the peer's, signed by
// the cluster CA.
package tlsnet
