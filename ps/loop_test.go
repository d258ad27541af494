package ps

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// bareClient is a worker client with no servers: enough for the loop.
func bareClient(f *fakeCoord, rank int) *Client {
	return &Client{ctl: f, opts: Options{Rank: rank}}
}

// rowCount is partition state that counts the rows trained into it.
type rowCount struct{ n int }

func (s *rowCount) MarshalBinary() ([]byte, error) {
	return binary.AppendUvarint(nil, uint64(s.n)), nil
}
func (s *rowCount) UnmarshalBinary(b []byte) error {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return fmt.Errorf("row count: %d bytes", len(b))
	}
	s.n = int(v)
	return nil
}

func identity(n int) func(int, int) []int {
	return func(int, int) []int {
		o := make([]int, n)
		for i := range o {
			o[i] = i
		}
		return o
	}
}

// TestLoopRecordsOnlyAcknowledged: whatever order the servers acknowledge
// minibatches in, every progress record names an offset whose rows before
// it are all acknowledged, with the state of exactly those rows, records
// arrive in order, at most Window minibatches are unacknowledged when a
// step starts, and the end is recorded once every push is acknowledged.
func TestLoopRecordsOnlyAcknowledged(t *testing.T) {
	const rows, batch, window = 200, 7, 4
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rng := rand.New(rand.NewPCG(seed, 1))
			ctl := newFakeCoord(1)
			var acked []bool // by minibatch; under ctl.mu
			prefix := func() int {
				n := 0
				for n < len(acked) && acked[n] {
					n++
				}
				return min(n*batch, rows)
			}
			last := -1
			ctl.check = func(u api.Update) error {
				st := &rowCount{}
				if err := st.UnmarshalBinary(u.State); err != nil {
					return err
				}
				switch {
				case u.Offset > prefix():
					t.Errorf("recorded offset %d with only the rows before %d acknowledged", u.Offset, prefix())
				case u.Offset < last:
					t.Errorf("record of offset %d after one of %d", u.Offset, last)
				case st.n != u.Offset:
					t.Errorf("record of offset %d carries the state of %d rows", u.Offset, st.n)
				case u.Complete && u.Offset != rows:
					t.Errorf("complete at %d of %d", u.Offset, rows)
				}
				last = u.Offset
				return nil
			}
			c := bareClient(ctl, 0)
			c.KeepState(func(int) PartitionState { return &rowCount{} })
			var pending []*Future // not yet acknowledged, by minibatch
			ackSome := func() {
				ctl.mu.Lock()
				defer ctl.mu.Unlock()
				for i, f := range pending {
					if f != nil && rng.IntN(3) == 0 {
						acked[i] = true
						f.partDone(nil)
						pending[i] = nil
					}
				}
			}
			done := make(chan error, 1)
			go func() {
				done <- c.EachPartition(ctx, 0, Loop{Order: identity(rows), Batch: batch, Window: window, ProgressEvery: 1 + int(seed%3),
					Step: func(_ context.Context, b Batch) (*Future, error) {
						ctl.mu.Lock()
						if n := len(pending) - countNil(pending); n > window {
							t.Errorf("step at %d with %d minibatches unacknowledged", b.Lo, n)
						}
						b.Lease.State().(*rowCount).n += len(b.Rows)
						f := newFuture(1)
						pending = append(pending, f)
						acked = append(acked, false)
						ctl.mu.Unlock()
						ackSome()
						return f, nil
					}})
			}()
			for {
				select {
				case err := <-done:
					if err != nil {
						t.Fatal(err)
					}
					if pc := ctl.piece(0, 0); !pc.done || pc.offset != rows {
						t.Fatalf("partition done %v at %d, want done at %d", pc.done, pc.offset, rows)
					}
					return
				default:
					ackSome()
					ctl.mu.Lock()
					yields := rng.IntN(50)
					ctl.mu.Unlock()
					for range yields {
						runtime.Gosched()
					}

				}
			}
		})
	}
}

// TestLoopDrain: a drain stops the loop at the next minibatch boundary
// and records that offset, with its state, once every push before it is
// acknowledged; the next holder goes on from there, and every row is
// trained once.
func TestLoopDrain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const rows, batch = 100, 10
	ctl := newFakeCoord(2)
	trained := make([]int, 2*rows)
	loop := func(c *Client, drainAt int) Loop {
		return Loop{Order: func(_, p int) []int { return identity(rows)(0, p) }, Batch: batch, ProgressEvery: 3,
			Step: func(_ context.Context, b Batch) (*Future, error) {
				for _, r := range b.Rows {
					trained[b.Lease.Partition*rows+r]++
				}
				b.Lease.State().(*rowCount).n += len(b.Rows)
				if b.Hi == drainAt {
					c.Drain()
				}
				return nil, nil
			}}
	}
	first := bareClient(ctl, 0)
	first.KeepState(func(int) PartitionState { return &rowCount{} })
	if err := first.EachPartition(ctx, 0, loop(first, 40)); !errors.Is(err, ErrDrained) {
		t.Fatalf("drained worker: %v, want ErrDrained", err)
	}
	u := ctl.records[len(ctl.records)-1]
	if u.Offset != 40 || u.Complete || string(u.State) != string(binary.AppendUvarint(nil, 40)) {
		t.Fatalf("drain recorded %+v, want offset 40 with the state of 40 rows", u)
	}
	ctl.release(0)
	second := bareClient(ctl, 1)
	second.KeepState(func(int) PartitionState { return &rowCount{} })
	if err := second.EachPartition(ctx, 0, loop(second, -1)); err != nil {
		t.Fatal(err)
	}
	for r, n := range trained {
		if n != 1 {
			t.Fatalf("row %d trained %d times", r, n)
		}
	}
	if st := string(ctl.blobs[ctl.piece(0, 0).states[0]]); st != string(binary.AppendUvarint(nil, rows)) {
		t.Errorf("partition 0 ends with state %x, want %d rows", st, rows)
	}
}

// TestLoopStepError: a step's error stops the loop; it waits for the
// pushes sent, and nothing past them is recorded.
func TestLoopStepError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctl := newFakeCoord(1)
	c := bareClient(ctl, 0)
	errBoom := errors.New("boom")
	var sent []*Future
	err := c.EachPartition(ctx, 0, Loop{Order: identity(50), Batch: 5, ProgressEvery: 1,
		Step: func(_ context.Context, b Batch) (*Future, error) {
			f := newFuture(1)
			sent = append(sent, f)
			go f.partDone(nil)
			if b.Lo == 25 {
				return f, errBoom
			}
			return f, nil
		}})
	if !errors.Is(err, errBoom) {
		t.Fatalf("got %v, want the step's error", err)
	}
	// The API's pass 0 is the first pass, "pass 1" wherever a person
	// reads it (the app's error that wraps this one says "pass 1").
	if !strings.Contains(err.Error(), "ps: pass 1 partition 0") {
		t.Errorf("error %q does not name pass 1, counted from 1 as the apps and events count", err)
	}
	for i, f := range sent {
		if !isDone(f) {
			t.Errorf("push %d still in flight when the loop returned", i)
		}
	}
	if pc := ctl.piece(0, 0); pc.offset > 25 || pc.done {
		t.Errorf("recorded offset %d (done %v) after a step failed at 25", pc.offset, pc.done)
	}
}

func countNil(fs []*Future) int {
	n := 0
	for _, f := range fs {
		if f == nil {
			n++
		}
	}
	return n
}

// TestLoopLookahead: every step is handed the rows of the Lookahead
// minibatches that follow it in the lease (fewer near its end, a short last
// one included), so that a prefetching step fetches exactly what it trains
// next.
func TestLoopLookahead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, la := range []int{0, 1, 3} {
		c := bareClient(newFakeCoord(1), 0)
		var got [][]int
		var next [][][]int
		err := c.EachPartition(ctx, 0, Loop{Order: identity(23), Batch: 5, Lookahead: la,
			Step: func(_ context.Context, b Batch) (*Future, error) {
				got = append(got, b.Rows)
				var n [][]int
				for _, r := range b.Next {
					n = append(n, slices.Clone(r))
				}
				next = append(next, n)
				return nil, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		want := max(la, 1)
		for i := range got {
			if w := min(want, len(got)-1-i); len(next[i]) != w {
				t.Errorf("lookahead %d, step %d: %d minibatches ahead, want %d", la, i, len(next[i]), w)
				continue
			}
			for j, rows := range next[i] {
				if !slices.Equal(rows, got[i+1+j]) {
					t.Errorf("lookahead %d, step %d: ahead[%d] = %v, then trained %v", la, i, j, rows, got[i+1+j])
				}
			}
		}
	}
}
