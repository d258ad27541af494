// Package meta keeps the cluster's coordination state (members, the
// coordinator's leadership, placement and epoch, tables, data-partition
// leases and progress) in etcd, embedded in the coordinator or external.
package meta
