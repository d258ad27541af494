package ps

import (
	"context"
	"time"
)

// A Pacer sees every minibatch of a client's partition loops right after
// its step, with how long the step took, and may hold the loop there
// (for example to make a worker straggle in a test or a benchmark:
// internal/harness/straggle). It returns an error only if ctx ended.
type Pacer interface {
	Pace(ctx context.Context, b Batch, took time.Duration) error
}

// Pace makes p see every minibatch of the client's partition loops from
// the next one on; nil stops it.
func (c *Client) Pace(p Pacer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pacer = p
}

func (c *Client) currentPacer() Pacer {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.pacer
}
