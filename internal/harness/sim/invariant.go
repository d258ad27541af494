package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/ps"
)

// ExactlyOnce checks the final model: a fresh client (no rank, so its
// reads never wait) reads every counter the Book saw pushed. Each must
// equal its acknowledged increments, plus up to one for each push that
// was in flight when its worker stopped (applied once or not at all).
//
// Where Copies says the key's slot lost every copy, the increments whose
// push began before the last such loss may be missing (ExpectLoss counts
// them); later ones may not. After the cluster went back to a
// checkpoint, with no loss of the slot since, it must hold what the
// checkpoint holds and what was acknowledged after (checkRewound).
type ExactlyOnce struct{}

func (ExactlyOnce) Check(ctx context.Context, c *Cluster) []Violation {
	keys := c.book.Keys()
	got, err := c.ReadFinal(ctx, CountersTable, keys)
	if err != nil {
		return []Violation{{Kind: KindBroken, Detail: fmt.Sprintf("final read: %v", err)}}
	}
	unc := c.book.Uncertain()
	end := c.book.Mark()
	rw, prev, rewound := c.lastRewind()
	var bad []string
	for i, k := range keys {
		all, u, v := c.book.Acked(k, 0), unc[k], int64(got[i])
		want := all
		lost := c.copies.LossBefore(keyspace.Slot(k), end)
		if rewound && lost < rw.at {
			// Gone back to a checkpoint, with no loss of the slot since.
			if msg := c.checkRewound(k, keyspace.Slot(k), rw, prev, v, u); msg != "" {
				bad = append(bad, msg)
			}
			continue
		}
		if lost > 0 {
			want = c.book.Acked(k, lost)
			if v < all {
				c.ExpectLoss(k, all-max(v, want))
			}
		}
		if v < want || v > all+u {
			bad = append(bad, fmt.Sprintf("key %d (slot %d): %d, want %d acknowledged (+ up to %d unconfirmed)", k, keyspace.Slot(k), v, want, u))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return []Violation{{Kind: KindExactlyOnce, Detail: fmt.Sprintf("%d keys wrong in the final model: %s", len(bad), strings.Join(bad[:min(len(bad), 10)], "; "))}}
}

// ReadFinal reads keys of table through a fresh client on a host of its
// own ("checker"), which holds no rank, so that its reads never wait.
func (c *Cluster) ReadFinal(ctx context.Context, table string, keys []uint64) ([]float32, error) {
	host := c.net.Host("checker")
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cl, err := ps.Dial(ctx, c.coordAddr, ps.Options{Rank: -1, NodeID: "checker", Logger: c.log.With("node", "checker"), Network: host})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	tb, err := cl.Table(ctx, table)
	if err != nil {
		return nil, err
	}
	got := make([]float32, len(keys))
	if err := tb.Pull(slices.Clone(keys), got).Wait(ctx); err != nil {
		return nil, err
	}
	return got, nil
}

// Staleness checks every read the Book recorded against the SSP bound
// (Book.CheckRead), owing nothing of what a slot lost with its last copy,
// nor, after a rewind, of what was pushed before the cluster was ready
// again.
type Staleness struct{}

func (Staleness) Check(_ context.Context, c *Cluster) []Violation {
	var out []Violation
	for _, r := range c.book.Reads() {
		if msg := c.book.CheckRead(r, c.lostBefore); msg != "" {
			out = append(out, Violation{Kind: KindStale, Detail: msg})
		}
	}
	return out
}
