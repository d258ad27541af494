package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
)

// TestRunWorkersNamesTheCause: when one worker's job fails, the others
// are canceled, and their "context canceled" is not what RunWorkers
// returns beside the failure (a bad data line was followed by a line of
// it on the terminal).
func TestRunWorkersNamesTheCause(t *testing.T) {
	ctx := t.Context()
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 1, Workers: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cause := errors.New("bad.txt:2: rating \"x\" is not a number")
	_, err = l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) {
		if c.Rank() == 0 {
			return nil, cause
		}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	if !errors.Is(err, cause) || strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("RunWorkers: %v, want the cause alone", err)
	}
}
