package ps_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// lockedBuffer is a log sink for several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSpreadPushSummedRight: a range pushed over two servers, its frames
// summed in the order of the caller's vector (spreadSums), arrives with
// the right CRC32C the first time. A wrong sum would not fail the push,
// since a server drops the connection and the client sends the part again
// as a key list, summed as usual; so the test fails on the servers'
// "dropping connection" as well as on wrong values.
func TestSpreadPushSummedRight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var logs lockedBuffer
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 2, Workers: 1, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const w = 2
	r := keyspace.Range{Lo: 5, Hi: 5 + 600_000} // past the slots placed one by one, several frames a server
	vals := make([]float32, r.Len()*w)
	for i := range vals {
		vals[i] = float32(i % 977)
	}
	got := make([]float32, len(vals))
	if _, err := l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) {
		tb, err := c.CreateTable(ctx, table.Spec{Name: "spread", Width: w})
		if err != nil {
			return nil, err
		}
		for range 2 {
			if err := tb.PushPullRange(r, vals, got).Wait(ctx); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := range vals {
		if got[i] != 2*vals[i] {
			t.Fatalf("value %d: pulled %v after pushing %v twice", i, got[i], vals[i])
		}
	}
	if s := logs.String(); strings.Contains(s, "dropping connection") {
		t.Fatalf("a server dropped the worker's connection:\n%s", s)
	}
}
