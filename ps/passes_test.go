package ps

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRunPasses: every pass is trained, then Trained, then evaluated, in
// order, and each result reaches the app's figures once; a pass that
// fails stops the run naming the pass.
func TestRunPasses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := bareClient(newFakeCoord(1), 0)
	var events []string
	var got []int
	var progressed int
	step := func(_ context.Context, b Batch) (*Future, error) { return nil, nil }
	err := c.RunPasses(ctx, Passes{
		N: 3,
		Loop: func(pass int) Loop {
			events = append(events, "loop")
			return Loop{Order: identity(10), Batch: 4, Step: step}
		},
		Trained: func(_ context.Context, pass int) error {
			events = append(events, "trained")
			return nil
		},
		Eval: func(pass int) EvalFunc {
			return func(context.Context) (map[string]float64, error) {
				events = append(events, "eval")
				return map[string]float64{"pass": float64(pass)}, nil
			}
		},
		Result: Collect(&got, func(r PassResult, _ float64) int { return r.Pass }, func(int) { progressed++ }),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"loop", "trained", "eval", "loop", "trained", "eval", "loop", "trained", "eval"}
	if len(events) != len(want) {
		t.Fatalf("events %v, want %v", events, want)
	}
	for i := range want {
		if events[i] != want[i] {
			t.Fatalf("events %v, want %v", events, want)
		}
	}
	if len(got) != 3 || got[0] != 1 || got[2] != 3 || progressed != 3 {
		t.Errorf("results %v (progress called %d times), want passes 1, 2, 3 once each", got, progressed)
	}

	boom := errors.New("boom")
	err = bareClient(newFakeCoord(1), 0).RunPasses(ctx, Passes{N: 2, Loop: func(int) Loop {
		return Loop{Order: identity(10), Batch: 4, Step: func(context.Context, Batch) (*Future, error) { return nil, boom }}
	}})
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "pass 1: ") {
		t.Errorf("got %v, want pass 1's error", err)
	}
}

// TestRunPassesMany: a job of more passes than memory holds words runs
// its passes one by one (RunPasses made a slice of N at the start, which
// ran out of memory at --passes 99999999999).
func TestRunPassesMany(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	boom := errors.New("boom")
	err := bareClient(newFakeCoord(1), 0).RunPasses(ctx, Passes{N: 1 << 62, Loop: func(pass int) Loop {
		step := func(context.Context, Batch) (*Future, error) { return nil, nil }
		if pass == 1 {
			step = func(context.Context, Batch) (*Future, error) { return nil, boom }
		}
		return Loop{Order: identity(10), Batch: 4, Step: step}
	}})
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "pass 2: ") {
		t.Errorf("got %v, want pass 2's error", err)
	}
}
