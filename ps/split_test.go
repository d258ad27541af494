package ps

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// rowStates is a SplittableState: how many times each row the piece
// holds was trained. Its blob lists the rows it holds, so that pieces
// restored each into a fresh one join into the whole.
type rowStates struct{ count map[int]uint8 }

func allRowStates(rows int) *rowStates {
	s := &rowStates{count: map[int]uint8{}}
	for r := range rows {
		s.count[r] = 0
	}
	return s
}

func (s *rowStates) MarshalBinary() ([]byte, error) {
	rows := make([]int, 0, len(s.count))
	for r := range s.count {
		rows = append(rows, r)
	}
	slices.Sort(rows)
	b := binary.AppendUvarint(nil, uint64(len(rows)))
	for _, r := range rows {
		b = binary.AppendUvarint(b, uint64(r))
		b = append(b, s.count[r])
	}
	return b, nil
}

func (s *rowStates) UnmarshalBinary(b []byte) error {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return errors.New("row states: no count")
	}
	b = b[k:]
	s.count = map[int]uint8{}
	for range n {
		r, k := binary.Uvarint(b)
		if k <= 0 || len(b) < k+1 {
			return errors.New("row states: cut short")
		}
		s.count[int(r)] = b[k]
		b = b[k+1:]
	}
	return nil
}

func (s *rowStates) Split(rows []int) (PartitionState, error) {
	tail := &rowStates{count: map[int]uint8{}}
	for _, r := range rows {
		n, ok := s.count[r]
		if !ok {
			return nil, fmt.Errorf("row %d is not this piece's", r)
		}
		tail.count[r] = n
		delete(s.count, r)
	}
	return tail, nil
}

func (s *rowStates) Join(other PartitionState) error {
	for r, n := range other.(*rowStates).count {
		if _, ok := s.count[r]; ok {
			return fmt.Errorf("row %d is in two pieces", r)
		}
		s.count[r] = n
	}
	return nil
}

// shuffled returns a fixed permutation of rows for each pass and
// partition, as apps order their rows.
func shuffled(rows int) func(pass, p int) []int {
	return func(pass, p int) []int {
		o := identity(rows)(pass, p)
		for i := range o {
			j := (i*7 + pass*13 + p*5) % rows
			o[i], o[j] = o[j], o[i]
		}
		return o
	}
}

// holdGate holds one worker's lease at its third minibatch until a split
// of it is asked for, and makes sure the request reaches the loop before
// the lease ends: without it a worker could finish before the request
// arrives, and the split would (correctly) be declined.
type holdGate struct {
	f         *fakeCoord
	partition int
	start     int           // the lease held is the piece that starts here
	mayAsk    chan struct{} // closed at the third minibatch
	lease     *Lease
	steps     int
}

// step runs in the lease's Step, on the loop's goroutine (so it may read
// the lease's last report).
func (g *holdGate) step(ctx context.Context, l *Lease) {
	if g == nil || l.Pass != 0 || l.Partition != g.partition || l.Start != g.start {
		return
	}
	g.steps++
	switch g.steps {
	case 3:
		// The record in flight answered before the split is asked for:
		// the loop makes a new one after this minibatch, and its reply
		// carries the request.
		if l.last != nil {
			wait(ctx, l.last.Done())
		}
		close(g.mayAsk)
		wait(ctx, g.f.asked(g.partition, g.start))
	case 4:
		wait(ctx, l.last.Done()) // the reply that carries the request
	}
}

func wait(ctx context.Context, ch <-chan struct{}) {
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// splitRun trains two passes of two partitions on workers A, B and C: B
// takes the tail of A's lease of partition 0 from row 60, and C the tail
// of B's piece from row 60, each once the holder has trained three
// minibatches of its piece. It returns how often each (pass, partition,
// row) was trained and what went wrong on the way.
//
// With drain, C drains after its first minibatch of the tail it took: its
// loop records how far it got, and A or B trains the rest of that piece.
func splitRun(t *testing.T, f *fakeCoord, rows int, fresh func(int) PartitionState, drain bool, check func(l *Lease, done bool, problem func(string, ...any))) (map[[3]int]int, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var mu sync.Mutex
	trained := map[[3]int]int{}
	var problems []string
	problem := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	gates := []*holdGate{{f: f, start: 0, mayAsk: make(chan struct{})}, {f: f, start: 60, mayAsk: make(chan struct{})}, nil}
	loop := func(c *Client, g *holdGate) Loop {
		return Loop{Order: shuffled(rows), Batch: 10, ProgressEvery: 1,
			Begin:     func(_ context.Context, l *Lease) error { check(l, false, problem); return nil },
			Completed: func(l *Lease) { check(l, true, problem) },
			Step: func(ctx context.Context, b Batch) (*Future, error) {
				mu.Lock()
				for _, r := range b.Rows {
					trained[[3]int{b.Lease.Pass, b.Lease.Partition, r}]++
				}
				mu.Unlock()
				if st, ok := b.Lease.State().(*rowStates); ok {
					for _, r := range b.Rows {
						if _, mine := st.count[r]; !mine {
							problem("pass %d partition %d: row %d trained under a lease whose state lacks it", b.Lease.Pass, b.Lease.Partition, r)
						}
						st.count[r]++
					}
				}
				g.step(ctx, b.Lease)
				if drain && c.opts.Rank == 2 && b.Lease.Pass == 0 {
					c.Drain()
				}
				return nil, nil
			}}
	}
	errs := make(chan error, 3)
	for i := range 3 {
		c := bareClient(f, i)
		c.KeepState(fresh)
		go func() {
			if i > 0 {
				// B and C steal when their victim has trained a little.
				wait(ctx, gates[i-1].mayAsk)
				err := c.Steal(ctx, 0, 0, 60, loop(c, gates[i]))
				if drain && i == 2 && errors.Is(err, ErrDrained) {
					f.release(i) // as the coordinator does when it leaves
					errs <- nil
					return
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d: %w", i, err)
					return
				}
			}
			for pass := range 2 {
				if err := c.EachPartition(ctx, pass, loop(c, gates[i])); err != nil {
					errs <- fmt.Errorf("worker %d: %w", i, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return trained, problems
}

// TestSplitLease: worker A trains partition 0; B takes the tail of A's
// lease from row 60 (A cuts at max(60, the first row it has not
// started)); C takes the tail of B's piece from row 60 again, which B has
// passed, so B cuts at its first row not started: a split of a split.
// Every row of each pass is trained exactly once, each piece's state holds
// exactly its own rows, and in the next pass the partition is granted
// whole with the three pieces' states, which join into the state of every
// row.
func TestSplitLease(t *testing.T) {
	const rows = 120
	f := newFakeCoord(2)
	trained, problems := splitRun(t, f, rows, func(int) PartitionState { return allRowStates(rows) }, false, splitCheck(rows))
	for _, p := range problems {
		t.Error(p)
	}
	for pass := range 2 {
		for p := range 2 {
			for r := range rows {
				if n := trained[[3]int{pass, p, r}]; n != 1 {
					t.Errorf("pass %d partition %d row %d trained %d times", pass, p, r, n)
				}
			}
		}
	}
	cuts := checkCuts(t, f, 60)
	if len(cuts) != 2 || cuts[0] != 60 {
		t.Errorf("cuts at %v, want A's at 60 and then B's", cuts)
	}
	joined := false
	for _, g := range f.granted {
		joined = joined || g.Partition == 0 && g.Start == 0 && g.Offset == 0 && len(g.States) == 3
	}
	if !joined {
		t.Errorf("no grant of partition 0 whole with its three pieces' states: %+v", f.granted)
	}
}

// splitCheck checks a lease's state when it begins and when it is done:
// it holds exactly its piece's rows, those before its offset trained once
// more than in earlier passes, and when done all of them; at the start of
// a pass, the piece is the whole partition.
func splitCheck(rows int) func(l *Lease, done bool, problem func(string, ...any)) {
	return func(l *Lease, done bool, problem func(string, ...any)) {
		st := l.State().(*rowStates)
		end, trainedTo := rows, l.Offset
		if done {
			end, trainedTo = l.End(), l.End()
		} else if l.end != api.ToEnd {
			end = l.end
		}
		order := shuffled(rows)(l.Pass, l.Partition)
		if len(st.count) != end-l.Start {
			problem("pass %d partition %d rows [%d, %d) (done %v): the state holds %d rows, want %d", l.Pass, l.Partition, l.Start, end, done, len(st.count), end-l.Start)
		}
		for i, r := range order[l.Start:end] {
			want := l.Pass
			if l.Start+i < trainedTo {
				want++
			}
			if n, ok := st.count[r]; !ok || int(n) != want {
				problem("pass %d partition %d rows [%d, %d) (done %v): row %d in the state %v (%d times), want %d times", l.Pass, l.Partition, l.Start, end, done, r, ok, n, want)
			}
		}
	}
}

// TestSplitThenDrain: C drains in the middle of the tail it took from B;
// A or B trains the rest of it from C's record, with C's state, and every
// row is trained exactly once.
func TestSplitThenDrain(t *testing.T) {
	const rows = 120
	f := newFakeCoord(2)
	trained, problems := splitRun(t, f, rows, func(int) PartitionState { return allRowStates(rows) }, true, splitCheck(rows))
	for _, p := range problems {
		t.Error(p)
	}
	for pass := range 2 {
		for p := range 2 {
			for r := range rows {
				if n := trained[[3]int{pass, p, r}]; n != 1 {
					t.Errorf("pass %d partition %d row %d trained %d times", pass, p, r, n)
				}
			}
		}
	}
	cuts := checkCuts(t, f, 60)
	resumed := false
	for _, g := range f.granted {
		resumed = resumed || len(cuts) == 2 && g.Partition == 0 && g.Start == cuts[1] && g.Offset == cuts[1]+10
	}
	if !resumed {
		t.Errorf("no grant of C's piece from its drained offset, a minibatch past its start (cuts %v): %+v", cuts, f.granted)
	}
}

// checkCuts returns where the cuts fell, and checks that each is at
// max(from, the first row its holder had not started), which its record
// names as its offset.
func checkCuts(t *testing.T, f *fakeCoord, from int) []int {
	t.Helper()
	var cuts []int
	for _, u := range f.records {
		if u.Cut == nil {
			continue
		}
		cuts = append(cuts, u.Cut.At)
		if u.Cut.Declined || u.Cut.At != max(from, u.Offset) {
			t.Errorf("cut %+v with the rows before %d trained, want one at %d", *u.Cut, u.Offset, max(from, u.Offset))
		}
	}
	return cuts
}

// TestStealDeclined: a lease whose partition state cannot be split
// declines a cut; the thief is told ErrNoSplit, and the holder trains its
// whole lease.
func TestStealDeclined(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const rows = 100
	f := newFakeCoord(1)
	holder, thief := bareClient(f, 0), bareClient(f, 1)
	holder.KeepState(func(int) PartitionState { return &rowCount{} })
	thief.KeepState(func(int) PartitionState { return &rowCount{} })
	trained := make([]int, rows)
	stole := make(chan error, 1)
	err := holder.EachPartition(ctx, 0, Loop{Order: identity(rows), Batch: 10, ProgressEvery: 1,
		Step: func(ctx context.Context, b Batch) (*Future, error) {
			for _, r := range b.Rows {
				trained[r]++
			}
			if b.Lo == 20 {
				wait(ctx, b.Lease.last.Done()) // so the next record carries the request
				go func() {
					stole <- thief.Steal(ctx, 0, 0, 50, Loop{Order: identity(rows), Batch: 10, Step: func(context.Context, Batch) (*Future, error) { return nil, errors.New("the thief trained") }})
				}()
				wait(ctx, f.asked(0, 0))
			}
			if b.Lo == 30 {
				wait(ctx, b.Lease.last.Done()) // the reply that carries the request
			}
			return nil, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-stole; !errors.Is(err, ErrNoSplit) {
		t.Fatalf("steal: %v, want ErrNoSplit", err)
	}
	for r, n := range trained {
		if n != 1 {
			t.Fatalf("row %d trained %d times", r, n)
		}
	}
	if !slices.ContainsFunc(f.records, func(u api.Update) bool { return u.Cut != nil && u.Cut.Declined }) {
		t.Errorf("the holder never declined the cut: %+v", f.records)
	}
	if err := thief.Steal(ctx, 0, 0, 50, Loop{Order: identity(rows), Batch: 10, Step: func(context.Context, Batch) (*Future, error) { return nil, nil }}); !errors.Is(err, ErrNoSplit) {
		t.Fatalf("steal of a finished lease: %v, want ErrNoSplit", err)
	}
}
