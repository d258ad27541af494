package ps_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// Example pushes to and pulls from a table on a local cluster of two
// servers and one worker.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster, err := node.StartLocal(ctx, node.LocalConfig{Servers: 2, Workers: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	_, err = cluster.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) {
		t, err := c.CreateTable(ctx, table.Spec{Name: "counts", Width: 1, Rule: table.Rule{Kind: table.Sum}})
		if err != nil {
			return nil, err
		}
		keys := []uint64{3, 64, 1000} // sorted and unique
		t.Push(keys, []float32{1, 2, 3})
		t.Push(keys, []float32{10, 20, 30})
		got := make([]float32, len(keys))
		if err := t.Pull(keys, got).Wait(ctx); err != nil { // a connection's requests apply in order
			return nil, err
		}
		fmt.Println(got)
		return nil, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: [11 22 33]
}

// ExampleTable_PullRange reads a dense range of keys, which travels
// without a key list.
func ExampleTable_PullRange() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster, err := node.StartLocal(ctx, node.LocalConfig{Servers: 2, Workers: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	_, err = cluster.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) {
		t, err := c.CreateTable(ctx, table.Spec{Name: "dense", Width: 2})
		if err != nil {
			return nil, err
		}
		r := keyspace.Range{Lo: 100, Hi: 104}
		if err := t.PushRange(r, []float32{1, 1, 2, 2, 3, 3, 4, 4}).Wait(ctx); err != nil {
			return nil, err
		}
		got := make([]float32, 8)
		if err := t.PullRange(r, got).Wait(ctx); err != nil {
			return nil, err
		}
		fmt.Println(got)
		return nil, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: [1 1 2 2 3 3 4 4]
}

// ExampleFuture_Wait shows the deadline: Wait never blocks longer than its
// context allows, whatever the servers do.
func ExampleFuture_Wait() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster, err := node.StartLocal(ctx, node.LocalConfig{Servers: 1, Workers: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	timedOut := make(chan struct{})
	_, err = cluster.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) {
		t, err := c.CreateTable(ctx, table.Spec{Name: "bsp", Width: 1, Consistency: table.Consistency{Model: table.BSP}})
		if err != nil {
			return nil, err
		}
		if c.Rank() == 0 {
			// Rank 0 moves to clock 1 while rank 1 is still at 0, so a BSP
			// read at clock 1 must wait for rank 1.
			c.Tick()
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			err := t.Pull([]uint64{1}, make([]float32, 1)).Wait(short)
			fmt.Println(errors.Is(err, ps.ErrTimeout))
			close(timedOut)
		} else {
			<-timedOut // rank 1 reaches clock 1 only then
			c.Tick()
		}
		return nil, c.Barrier(ctx)
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: true
}
