// Package coordha runs the coordinator on etcd: replicas campaign for
// leadership, the leader saves its state in etcd after every change, and a
// replica that takes over restores it, so that no coordinator is a single
// point of failure.
package coordha
