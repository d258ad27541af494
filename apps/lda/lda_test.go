package lda

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

const (
	kosDocWords = "../../datasets/kos/doc_word_count.tsv.gz"
	kosVocab    = "../../datasets/kos/dictionary.txt"
)

// kosSubset writes the first n documents of KOS to a file of the same
// form, for tests that need many passes or a failure more than realism.
func kosSubset(t testing.TB, n int) string {
	t.Helper()
	c, err := data.ReadDocWords(kosDocWords)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for d := range n {
		counts := map[uint32]int{}
		for _, w := range c.Doc(d) {
			counts[w]++
		}
		words := make([]uint32, 0, len(counts))
		for w := range counts {
			words = append(words, w)
		}
		slices.Sort(words)
		for _, w := range words {
			fmt.Fprintf(&b, "%d\t%d\t%d\n", c.IDs[d], w, counts[w])
		}
	}
	path := filepath.Join(t.TempDir(), "kos.tsv")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// localCluster starts a coordinator and servers for workers workers.
func localCluster(t testing.TB, ctx context.Context, servers, workers, partitions int) *node.Local {
	t.Helper()
	// A failure timeout of 3 s, not 1: with every package testing at once
	// on two cores, a live worker was once silent for 1.2 s and fenced.
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: servers, Workers: workers, Partitions: partitions, Replication: min(servers, 2),
		FailureTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// runWorkers runs job on n workers at once, each to its own end (unlike
// node.Local.RunWorkers, one worker's failure or drain does not stop the
// others), and returns their results by rank.
func runWorkers(ctx context.Context, l *node.Local, n int, job func(ctx context.Context, c *ps.Client) (*Report, error)) ([]*Report, []error) {
	reps := make([]*Report, n)
	errs := make([]error, n)
	if deadline, ok := ctx.Deadline(); ok {
		// Should training hang (it did once, in a loaded CI run: a
		// worker waited 2 minutes for a progress report or its pushes),
		// every goroutine's stack, of workers, servers and coordinator
		// alike, says where.
		dump := time.AfterFunc(time.Until(deadline)-5*time.Second, dumpStacks)
		defer dump.Stop()
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var rank int
			_, err := node.RunWorker(ctx, node.WorkerConfig{ID: fmt.Sprintf("worker-%d", i), Coordinator: l.CoordAddr},
				func(ctx context.Context, c *ps.Client) (any, error) {
					rank = c.Rank()
					rep, err := job(ctx, c)
					reps[rank] = rep
					return rep, err
				})
			errs[rank] = err
		}()
	}
	wg.Wait()
	return reps, errs
}

// dumpStacks writes every goroutine's stack to a file and says where.
func dumpStacks() {
	f, err := os.CreateTemp("", "terrace-lda-hang-*.stacks")
	if err != nil {
		fmt.Fprintln(os.Stderr, "lda test: training hangs; stacks not written:", err)
		return
	}
	defer f.Close()
	pprof.Lookup("goroutine").WriteTo(f, 2)
	fmt.Fprintln(os.Stderr, "lda test: training hangs; every goroutine's stack is in", f.Name())
}

// pullTable reads the whole word-topic table (v word rows, then the totals).
func pullTable(t *testing.T, ctx context.Context, l *node.Local, v, k int) []float32 {
	t.Helper()
	c, err := ps.Dial(ctx, l.CoordAddr, ps.Options{Rank: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tbl, err := c.Table(ctx, TableName)
	if err != nil {
		t.Fatal(err)
	}
	wk := make([]float32, (v+1)*k)
	if err := tbl.PullRange(keyspace.Range{Lo: 0, Hi: uint64(v) + 1}, wk).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	return wk
}

// finalStates records each partition's topics as its last pass completes.
type finalStates struct {
	mu   sync.Mutex
	last int // the last pass
	z    map[int][]uint16
}

func (f *finalStates) record(pass, partition int, z []uint16) {
	if pass != f.last {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.z == nil {
		f.z = map[int][]uint16{}
	}
	f.z[partition] = slices.Clone(z)
}

// mismatch compares the table with the counts of the recorded topics:
// the number of (word, topic) cells that differ, and, per topic, the table
// total, the totals key and the topics' count.
type mismatch struct {
	cells                     int
	table, totalsKey, inState []int
}

func compare(t *testing.T, wk []float32, train *data.Corpus, parts []data.Part, z map[int][]uint16, v, k int) mismatch {
	t.Helper()
	want := make([]int, v*k)
	m := mismatch{table: make([]int, k), totalsKey: make([]int, k), inState: make([]int, k)}
	for p, part := range parts {
		zp, ok := z[p]
		if !ok {
			t.Fatalf("no final state recorded for partition %d", p)
		}
		for i, w := range train.Words[train.DocPtr[part.Lo]:train.DocPtr[part.Hi]] {
			want[int(w)*k+int(zp[i])]++
			m.inState[zp[i]]++
		}
	}
	for i := range want {
		if float32(want[i]) != wk[i] {
			m.cells++
		}
		m.table[i%k] += int(wk[i])
	}
	for tp := range k {
		m.totalsKey[tp] = int(wk[v*k+tp])
	}
	return m
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

// TestOneWorkerIsTheSequentialSampler: one BSP worker sees every count
// its own earlier pushes made (a pull waits for the previous clock's
// pushes), and visits the documents in the baseline's order with the
// baseline's random streams, so it must reproduce the sequential sampler
// exactly: same topics, same table, same log-likelihood. This checks the
// pull, delta and push arithmetic, not just a tolerance.
func TestOneWorkerIsTheSequentialSampler(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const partitions = 3
	cfg := DefaultConfig()
	cfg.Train, cfg.HoldOut, cfg.Passes, cfg.Batch = kosSubset(t, 300), 0, 4, 16
	cfg.Consistency = table.Consistency{Model: table.BSP}
	corpus, err := data.ReadDocWords(cfg.Train)
	if err != nil {
		t.Fatal(err)
	}
	seq := sequential(corpus, corpus.NumWords, partitions, cfg)

	l := localCluster(t, ctx, 1, 1, partitions)
	var final finalStates
	final.last = cfg.Passes - 1
	cfg.OnComplete = final.record
	reps, errs := runWorkers(ctx, l, 1, func(ctx context.Context, c *ps.Client) (*Report, error) { return Run(ctx, c, cfg) })
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	for p := range partitions {
		if !slices.Equal(final.z[p], seq.z[p]) {
			t.Fatalf("partition %d: the worker's topics differ from the sequential sampler's", p)
		}
	}
	wk := pullTable(t, ctx, l, corpus.NumWords, cfg.Topics)
	if !slices.Equal(wk, seq.wk) {
		t.Fatal("the table differs from the sequential sampler's counts")
	}
	for e, st := range reps[0].Passes {
		if st.LogLikelihood != seq.ll[e] {
			t.Errorf("pass %d: log-likelihood per token %v, sequential %v", e+1, st.LogLikelihood, seq.ll[e])
		}
	}
}

// TestKOSMatchesSequential trains KOS with the defaults on two servers and
// two workers (SSP, staleness 2: each worker samples against counts that
// miss up to two clocks of the other's moves) and checks that the final
// training log-likelihood per token is within 1.5% of the sequential
// sampler's after as many sweeps (0.25-0.84% in six quiet runs of the
// fourteenth session, 1.08% in a loaded CI run; docs/design/lda.md), and
// that the held-out perplexity is sane.
func TestKOSMatchesSequential(t *testing.T) {
	if testing.Short() {
		t.Skip("trains KOS for 30 passes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := DefaultConfig()
	cfg.Train, cfg.Vocab = kosDocWords, kosVocab
	corpus, err := data.ReadDocWords(cfg.Train)
	if err != nil {
		t.Fatal(err)
	}
	train, _ := split(corpus, cfg.HoldOut)
	seq := sequential(train, corpus.NumWords, 8, cfg)

	l := localCluster(t, ctx, 2, 2, 8)
	reps, errs := runWorkers(ctx, l, 2, func(ctx context.Context, c *ps.Client) (*Report, error) { return Run(ctx, c, cfg) })
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	got, want := reps[0].LogLikelihood, seq.ll[len(seq.ll)-1]
	t.Logf("log-likelihood per token after %d passes: distributed %.4f, sequential %.4f (random start %.4f); held-out perplexity %.0f",
		cfg.Passes, got, want, seq.ll[0], reps[0].TestPerplexity)
	if math.Abs(got-want) > 0.015*math.Abs(want) {
		t.Errorf("distributed log-likelihood per token %.4f, sequential %.4f: more than 1.5%% apart", got, want)
	}
	if p := reps[0].TestPerplexity; !(p > 100 && p < float64(corpus.NumWords)) {
		t.Errorf("held-out perplexity %v, want between 100 and the vocabulary size %d", p, corpus.NumWords)
	}
	if n := reps[0].Passes; n[len(n)-1].TestPerplexity >= n[0].TestPerplexity {
		t.Errorf("held-out perplexity went from %.0f to %.0f, want it lower", n[0].TestPerplexity, n[len(n)-1].TestPerplexity)
	}
	// The topics come with the last pass's evaluation, which belongs to
	// the job: whichever worker claimed it has them.
	var topics []Topic
	for _, r := range reps {
		if r != nil && len(r.Topics) > 0 {
			topics = r.Topics
		}
	}
	if len(topics) < 3 {
		t.Fatalf("no worker's report has the topics of the last pass's evaluation")
	}
	for _, tp := range topics[:3] {
		t.Logf("topic of %d tokens: %s", tp.Tokens, strings.Join(tp.Words, " "))
	}
}
