// Package layout is the cluster's published configuration: the range map,
// the tables, the workers and the data partitions, as the coordinator
// announces them to servers and workers.
package layout
