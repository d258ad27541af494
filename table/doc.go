// Package table describes parameter tables: value width, update rule,
// initialisation, consistency model and push encoding, as agreed by the
// coordinator, the servers and the workers.
package table
