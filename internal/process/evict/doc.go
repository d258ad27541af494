// Package evict turns the ways a node can learn that its machine is about to
// be taken away (a file, a local HTTP call, the AWS or GCP metadata service,
// a signal) into one stream of eviction notices.
package evict
