// Package store holds one table's values and optimizer state on one server.
package store
