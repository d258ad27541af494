// Package meta keeps the cluster's coordination state (members, the
// coordinator's leadership, placement and epoch, the coordinator's saved
// state and partition state blobs) in etcd, embedded in the coordinator
// or external.
package meta
