// Package data reads training data (LIBSVM sparse rows, rating triples,
// bag-of-words documents) into memory and cuts it into partitions and
// minibatch orders for workers.
package data
