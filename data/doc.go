// Package data reads training data (LIBSVM sparse rows, rating triples) into
// memory and cuts it into partitions and minibatch orders for workers.
package data
