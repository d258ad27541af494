// Package keyspace defines parameter keys, key ranges and the 64-key slots
// by which keys are stored and placed on servers.
package keyspace
