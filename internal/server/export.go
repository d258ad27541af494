package server

import (
	"context"
	"fmt"

	"github.com/terrace-ml/terrace/internal/storage/checkpoint"
)

// ReadCheckpoint calls fn for every key of table id in cluster checkpoint
// seq under dir, written by servers: each key once, since a server writes
// the keys of the slots it heads. fn must not keep val.
func ReadCheckpoint(ctx context.Context, dir string, seq uint64, servers []string, id uint32, fn func(key uint64, val []float32) error) error {
	for _, srv := range servers {
		c, err := checkpoint.Open(ctx, checkpoint.ServerDir(dir, srv), seq)
		if err != nil {
			return fmt.Errorf("checkpoint %d of server %s: %w", seq, srv, err)
		}
		if _, ok := c.File(tableFile(id)); !ok {
			continue // a server that headed no slot of the table
		}
		err = c.ReadTable(ctx, tableFile(id), func(k uint64, v []float32, _ [][]float32) error { return fn(k, v) })
		if err != nil {
			return fmt.Errorf("checkpoint %d of server %s: %w", seq, srv, err)
		}
	}
	return nil
}
