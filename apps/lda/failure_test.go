package lda

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
)

// The failure tests train KOS for 4 passes (an initialisation and three
// sweeps) on two servers and two workers, 8 partitions of about 386
// documents, minibatches of 64, so a progress report every 256 documents;
// rank 1 leaves in the middle of its first partition of the third pass.
const (
	failPasses = 4
	failPass   = 2
)

func failConfig() Config {
	cfg := DefaultConfig()
	cfg.Train, cfg.Passes = kosDocWords, failPasses
	return cfg
}

// kosTrain is the training split the failure tests' workers use, and its
// partitions.
func kosTrain(t *testing.T, cfg Config) (*data.Corpus, []data.Part, int) {
	t.Helper()
	corpus, err := data.ReadDocWords(cfg.Train)
	if err != nil {
		t.Fatal(err)
	}
	train, _ := split(corpus, cfg.HoldOut)
	return train, data.Partition(train.NumDocs(), 8), corpus.NumWords
}

// TestDrainMovesState: rank 1 drains two minibatches into a partition; it
// records its progress and state there, and rank 0 finishes the partition
// from that offset with those topics. Nothing is trained twice, so the
// table must hold exactly the counts of the partitions' final topics. Were
// the state not restored (rank 0 starting the rest of the partition from
// other topics than those rank 1's pushes were counted under), the table
// would no longer match: the test fails on that.
func TestDrainMovesState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := failConfig()
	train, parts, v := kosTrain(t, cfg)
	l := localCluster(t, ctx, 2, 2, len(parts))
	final := &finalStates{last: failPasses - 1}
	cfg.OnComplete = final.record
	drainedPart, drainedAt := -1, 0
	var drainedDocs int64 // documents rank 1 trained
	reps, errs := runWorkers(ctx, l, 2, func(ctx context.Context, c *ps.Client) (*Report, error) {
		cfg := cfg
		if c.Rank() == 1 {
			last := map[[2]int]int{} // rank 1's offset in each (pass, partition)
			cfg.AfterBatch = func(e, p, off int, _ []uint16) error {
				drainedDocs += int64(off - last[[2]int{e, p}])
				last[[2]int{e, p}] = off
				if e == failPass && drainedPart < 0 && off == 2*cfg.Batch {
					drainedPart, drainedAt = p, off
					c.Drain()
				}
				return nil
			}
		}
		return Run(ctx, c, cfg)
	})
	if errs[0] != nil || !errors.Is(errs[1], node.ErrDrained) {
		t.Fatalf("worker errors %v; want rank 0 to finish and rank 1 to drain", errs)
	}
	if drainedPart < 0 {
		t.Fatal("rank 1 never drained")
	}
	// Nothing repeated: every document trained once per pass.
	if got, want := reps[0].Examples+drainedDocs, int64(failPasses*train.NumDocs()); got != want {
		t.Errorf("documents trained %d, want %d (once per pass)", got, want)
	}
	m := compare(t, pullTable(t, ctx, l, v, cfg.Topics), train, parts, final.z, v, cfg.Topics)
	if m.cells != 0 || !slices.Equal(m.table, m.inState) || !slices.Equal(m.totalsKey, m.inState) || sum(m.inState) != train.Tokens() {
		t.Fatalf("after a drain, %d (word, topic) counts differ from the topics; per topic the table holds %v (totals key %v), the states %v (%d tokens, corpus %d)",
			m.cells, m.table, m.totalsKey, m.inState, sum(m.inState), train.Tokens())
	}
	t.Logf("rank 1 drained partition %d at document %d of pass %d; rank 0 resumed it from the saved topics; table and topics agree on all %d tokens",
		drainedPart, drainedAt, failPass+1, train.Tokens())
}

var errDie = errors.New("worker dies")

// TestDeadWorkerMovesState: rank 1 dies two minibatches after its last
// progress report, its pushes for them applied; its lease expires and
// rank 0 trains those documents again from the topics saved at the report.
// The table then differs from the partitions' final topics by exactly the
// dead worker's moves of those documents' tokens (from the saved topics
// to the ones it drew), which the test predicts cell by cell: the state
// moved, and the only damage is the documented one. The topic totals,
// which moves preserve, still add up to the corpus.
func TestDeadWorkerMovesState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := failConfig()
	train, parts, v := kosTrain(t, cfg)
	l := localCluster(t, ctx, 2, 2, len(parts))
	final := &finalStates{last: failPasses - 1}
	cfg.OnComplete = final.record
	var (
		mu               sync.Mutex
		dead             = -1 // the partition rank 1 died in
		saved, died      []uint16
		savedAt, diedAt  int
		progressAt       = progressEvery * cfg.Batch
		dieAt            = progressAt + 2*cfg.Batch
		resumedAt, first = -1, true
	)
	reps, errs := runWorkers(ctx, l, 2, func(ctx context.Context, c *ps.Client) (*Report, error) {
		cfg := cfg
		cfg.AfterBatch = func(e, p, off int, z []uint16) error {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case c.Rank() == 1 && e == failPass && dead < 0 && off == progressAt:
				saved, savedAt = slices.Clone(z), off // what the coming Progress saves
			case c.Rank() == 1 && e == failPass && dead < 0 && off == dieAt:
				dead, died, diedAt = p, slices.Clone(z), off
				return errDie
			case c.Rank() == 0 && e == failPass && p == dead && first:
				resumedAt, first = off-cfg.Batch, false
			}
			return nil
		}
		return Run(ctx, c, cfg)
	})
	if errs[0] != nil || !errors.Is(errs[1], errDie) {
		t.Fatalf("worker errors %v; want rank 0 to finish and rank 1 to die", errs)
	}
	if resumedAt != savedAt {
		t.Fatalf("rank 0 resumed partition %d at %d, want the last progress, %d", dead, resumedAt, savedAt)
	}
	// The table predicted: the final topics' counts plus, for every token
	// the dead worker moved after its last report, +1 at its new topic
	// and -1 at its saved one.
	k := cfg.Topics
	want := counts(train, parts, final.z, v, k)
	moved := 0
	part := parts[dead]
	for i, w := range train.Words[train.DocPtr[part.Lo]:train.DocPtr[part.Hi]] {
		if saved[i] != died[i] {
			want[int(w)*k+int(died[i])]++
			want[int(w)*k+int(saved[i])]--
			want[v*k+int(died[i])]++
			want[v*k+int(saved[i])]--
			moved++
		}
	}
	got := pullTable(t, ctx, l, v, k)
	cells := 0
	for i := range want {
		if float32(want[i]) != got[i] {
			cells++
		}
	}
	if cells != 0 {
		t.Fatalf("%d table cells differ from the final topics' counts plus the dead worker's %d unreported moves", cells, moved)
	}
	if moved == 0 {
		t.Fatal("the dead worker moved no token after its last report: nothing was tested")
	}
	m := compare(t, got, train, parts, final.z, v, k)
	if sum(m.table) != train.Tokens() || sum(m.totalsKey) != train.Tokens() || !slices.Equal(m.table, m.totalsKey) {
		t.Fatalf("topic totals: table %v (%d), totals key %v (%d); want both to add up to the %d tokens",
			m.table, sum(m.table), m.totalsKey, sum(m.totalsKey), train.Tokens())
	}
	drift := 0
	for tp := range k {
		drift += max(m.table[tp]-m.inState[tp], 0)
	}
	t.Logf("rank 1 died in partition %d at document %d of pass %d, %d documents after its last report; rank 0 resumed at %d: "+
		"%d tokens moved twice, %d of %d table cells off by them, %d tokens counted under another topic than they hold (of %d); rank 0 trained %d documents",
		dead, diedAt, failPass+1, diedAt-savedAt, resumedAt, moved, m.cells, len(want), drift, train.Tokens(), reps[0].Examples)
}

// counts is the table the final topics of every partition imply: v word
// rows of k counts, then the totals.
func counts(train *data.Corpus, parts []data.Part, z map[int][]uint16, v, k int) []int {
	c := make([]int, (v+1)*k)
	for p, part := range parts {
		for i, w := range train.Words[train.DocPtr[part.Lo]:train.DocPtr[part.Hi]] {
			c[int(w)*k+int(z[p][i])]++
			c[v*k+int(z[p][i])]++
		}
	}
	return c
}
