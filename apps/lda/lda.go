package lda

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// Config configures a training run.
type Config struct {
	// Train is a doc-word-count file (data.ReadDocWords). Every HoldOut-th
	// document is held out of training to measure perplexity (none if 0).
	Train   string
	HoldOut int
	// Vocab, when set, is the vocabulary (data.ReadVocab) that rank 0
	// names each topic's top words with.
	Vocab string
	// Passes is the number of passes over the data: the first assigns
	// every token a random topic and pushes the counts, each later one is
	// a Gibbs sweep.
	Passes int
	// Topics is K, Alpha and Beta the symmetric Dirichlet priors of the
	// documents' topic mixtures and the topics' word distributions.
	Topics      int
	Alpha, Beta float64
	// Batch is the number of documents in one worker's minibatch.
	Batch       int
	Consistency table.Consistency
	Seed        uint64
	// Model, when set, is the directory where the worker that evaluates
	// the last pass writes the topic-word counts and top words (export.go).
	Model string
	// Progress, when set, is called by rank 0 after every pass.
	Progress func(PassStats)
	// AfterBatch, when set, is called from the worker's goroutine once a
	// minibatch's pushes are sent, with the partition offset after it and
	// the partition's topics (valid during the call only). Tests drain a
	// worker there; an error stops the worker as if it died between two
	// progress reports, except that it first waits for the pushes it sent,
	// so that the test knows what the servers hold.
	AfterBatch func(pass, partition, offset int, z []uint16) error
	// OnComplete, when set, is called once a partition's pass is recorded
	// complete, with the topics of its tokens in corpus order (valid
	// during the call only): what the partition's next holder gets back.
	OnComplete func(pass, partition int, z []uint16)
}

// DefaultConfig is the configuration `terrace train --app lda` starts from.
func DefaultConfig() Config {
	return Config{Passes: 30, Topics: 20, Alpha: 0.1, Beta: 0.01, Batch: 64, HoldOut: 10,
		Consistency: table.Consistency{Model: table.SSP, Staleness: 2}, Seed: 1}
}

// Check refuses a configuration that cannot train: Run calls it, and a
// command can before it starts a cluster.
func (cfg *Config) Check() error {
	switch {
	case cfg.Topics < 1 || cfg.Topics > math.MaxUint16:
		return fmt.Errorf("lda: %d topics: want 1 to %d", cfg.Topics, math.MaxUint16)
	case !(cfg.Alpha > 0) || !(cfg.Beta > 0) || math.IsInf(cfg.Alpha, 0) || math.IsInf(cfg.Beta, 0):
		return fmt.Errorf("lda: priors alpha %v and beta %v must be positive", cfg.Alpha, cfg.Beta)
	case cfg.Passes < 1 || cfg.Batch < 1:
		return fmt.Errorf("lda: %d passes of minibatches of %d documents: want at least 1 of each", cfg.Passes, cfg.Batch)
	case cfg.HoldOut < 0 || cfg.HoldOut == 1:
		return fmt.Errorf("lda: hold out every %d-th document: want 0 (none) or at least 2", cfg.HoldOut)
	}
	return nil
}

// PassStats is rank 0's view after one pass.
type PassStats struct {
	Pass    int     `json:"pass"`
	Seconds float64 `json:"seconds"`
	// LogLikelihood is log p(w | z) per training token (see logLikelihood).
	LogLikelihood  float64 `json:"train_loglik_per_token"`
	TestPerplexity float64 `json:"test_perplexity,omitempty"`
}

// Topic is one topic's share of the training tokens and its top words.
type Topic struct {
	Tokens int      `json:"tokens"`
	Words  []string `json:"words"`
}

// Report is one worker's result; the model's figures are rank 0's.
type Report struct {
	App  string `json:"app"`
	Rank int    `json:"rank"`
	// Examples counts the documents this worker trained, Tokens their
	// tokens, once per pass (a resumed partition's repeated ones again).
	Examples          int64       `json:"examples"`
	Tokens            int64       `json:"tokens"`
	Seconds           float64     `json:"seconds"`
	ExamplesPerSecond float64     `json:"examples_per_second"`
	TokensPerSecond   float64     `json:"tokens_per_second"`
	LogLikelihood     float64     `json:"train_loglik_per_token,omitempty"`
	TestPerplexity    float64     `json:"test_perplexity,omitempty"`
	Refused           int64       `json:"refused_non_finite"`
	Passes            []PassStats `json:"passes,omitempty"`
	// Topics, largest first, with their top words.
	Topics []Topic `json:"topics,omitempty"`
}

// TableName is the word-topic count table's name. Key w < V holds word
// w's count in each topic, key V the topics' totals.
const TableName = "lda.topics"

// progressEvery is how many minibatches pass between progress records: at
// most what a dead worker's successor repeats.
const progressEvery = 4

// maxWords bounds the vocabulary: workers keep arrays indexed by word.
const maxWords = 1 << 24

// topWords is how many words each topic of the report lists.
const topWords = 10

// Run trains on this worker's partitions of cfg.Train and, on rank 0,
// evaluates the model after every pass.
func Run(ctx context.Context, c *ps.Client, cfg Config) (*Report, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	corpus, err := data.ReadDocWords(cfg.Train)
	if err == nil {
		err = data.CheckRows(cfg.Train, corpus.NumDocs())
	}
	if err != nil {
		return nil, fmt.Errorf("lda: %w", err)
	}
	if corpus.NumWords > maxWords {
		return nil, fmt.Errorf("lda: %s: word ids up to %d, at most %d supported", cfg.Train, corpus.NumWords-1, maxWords-1)
	}
	var vocab []string
	if cfg.Vocab != "" { // every worker may evaluate the last pass
		if vocab, err = data.ReadVocab(cfg.Vocab); err != nil {
			return nil, fmt.Errorf("lda: %w", err)
		}
		if len(vocab) < corpus.NumWords {
			return nil, fmt.Errorf("lda: %s has %d words, but %s uses word id %d", cfg.Vocab, len(vocab), cfg.Train, corpus.NumWords-1)
		}
	}
	train, test := split(corpus, cfg.HoldOut)
	tbl, err := c.CreateTable(ctx, table.Spec{Name: TableName, Width: cfg.Topics, Rule: table.Rule{Kind: table.Sum},
		Consistency: cfg.Consistency, Encoding: table.Sparse})
	if err != nil {
		return nil, fmt.Errorf("lda: %w", err)
	}
	// Every worker sizes the model from the whole corpus, so that all
	// agree on V (the totals' key and the prior's Vβ).
	w := newWorker(c, tbl, train, corpus.NumWords, cfg)
	c.KeepState(func(p int) ps.PartitionState { return newState(train, w.parts[p], cfg.Topics, cfg.Seed) })
	rep := &Report{App: "lda", Rank: c.Rank()}
	evalAt := func(pass int) ps.EvalFunc {
		return func(ctx context.Context) (map[string]float64, error) {
			st, err := w.evaluate(ctx, test, vocab, pass == cfg.Passes-1, rep)
			return map[string]float64{"train_loglik_per_token": st.LogLikelihood, "test_perplexity": st.TestPerplexity}, err
		}
	}
	start := time.Now()
	// Partitions are leased: a dead or drained worker's partition is
	// finished by another from its last recorded offset, with the topics
	// as they were there, and a pass's loop returns when every partition
	// of the pass is trained, which is the pass's barrier.
	err = c.RunPasses(ctx, ps.Passes{
		N:    cfg.Passes,
		Loop: func(int) ps.Loop { return w.loop() },
		Eval: evalAt,
		Result: ps.Collect(&rep.Passes, func(r ps.PassResult, secs float64) PassStats {
			return PassStats{Pass: r.Pass, Seconds: secs, LogLikelihood: r.Metrics["train_loglik_per_token"], TestPerplexity: r.Metrics["test_perplexity"]}
		}, cfg.Progress),
	})
	if err != nil {
		return nil, fmt.Errorf("lda: %w", err)
	}
	rep.Seconds = time.Since(start).Seconds()
	rep.Examples, rep.Tokens = w.docs, w.tokens
	rep.ExamplesPerSecond = float64(rep.Examples) / rep.Seconds
	rep.TokensPerSecond = float64(rep.Tokens) / rep.Seconds
	rep.Refused = tbl.Refused()
	if n := len(rep.Passes); n > 0 {
		rep.LogLikelihood, rep.TestPerplexity = rep.Passes[n-1].LogLikelihood, rep.Passes[n-1].TestPerplexity
	}
	if err := c.Finish().Wait(ctx); err != nil {
		return nil, err
	}
	return rep, nil
}

// Rows returns how many documents of cfg.Train are trained, those not
// held out: the partition loop numbers them 0 to Rows-1, in corpus order.
func Rows(cfg Config) (int, error) {
	corpus, err := data.ReadDocWords(cfg.Train)
	if err != nil {
		return 0, fmt.Errorf("lda: %w", err)
	}
	train, _ := split(corpus, cfg.HoldOut)
	return train.NumDocs(), nil
}

// split holds every every-th document of c out of training (none if every
// is 0).
func split(c *data.Corpus, every int) (train, test *data.Corpus) {
	train = &data.Corpus{DocPtr: []int{0}, NumWords: c.NumWords}
	test = &data.Corpus{DocPtr: []int{0}, NumWords: c.NumWords}
	for d := range c.NumDocs() {
		to := train
		if every > 0 && d%every == every-1 {
			to = test
		}
		to.IDs = append(to.IDs, c.IDs[d])
		to.Words = append(to.Words, c.Doc(d)...)
		to.DocPtr = append(to.DocPtr, len(to.Words))
	}
	return train, test
}

// worker trains leased partitions: it holds one minibatch's key list and
// scratch space.
type worker struct {
	c       *ps.Client
	tbl     *ps.Table
	cfg     Config
	train   *data.Corpus
	parts   []data.Part
	v, k    int
	sampler *sampler
	// pos maps a word to its row in the current batch's key list; stamp
	// marks the words already collected for the batch (gen).
	pos   []int32
	stamp []uint32
	gen   uint32
	// docs and tokens count what this worker trained.
	docs, tokens int64
}

func newWorker(c *ps.Client, tbl *ps.Table, train *data.Corpus, v int, cfg Config) *worker {
	return &worker{
		c: c, tbl: tbl, cfg: cfg, train: train, v: v, k: cfg.Topics,
		parts:   data.Partition(train.NumDocs(), c.Layout().Partitions),
		sampler: newSampler(cfg.Topics, v, cfg.Alpha, cfg.Beta),
		pos:     make([]int32, v), stamp: make([]uint32, v),
	}
}

// errStateLost is returned when a lease's state is not the one its offset
// needs, such as a fresh state for a partition already trained: training
// on would make the table disagree with the topics for good.
var errStateLost = errors.New("lda: partition state lost")

// loop is the pass's partition loop: minibatches of documents in the
// pass's order, each a Step that pushes its count changes, and the
// topics as the partition state that the loop snapshots with each
// progress record, once the pushes before it are acknowledged.
func (w *worker) loop() ps.Loop {
	return ps.Loop{
		Order: func(pass, p int) []int { return w.parts[p].Order(w.cfg.Seed, pass) },
		Batch: w.cfg.Batch, ProgressEvery: progressEvery,
		Begin: func(_ context.Context, l *ps.Lease) error {
			return l.State().(*partState).resume(l.Partition, l.Offset > l.Start, l.Pass)
		},
		Step: w.step,
		Completed: func(l *ps.Lease) {
			if w.cfg.OnComplete != nil {
				w.cfg.OnComplete(l.Pass, l.Partition, l.State().(*partState).z)
			}
		},
	}
}

// step trains one minibatch of documents and returns the push of its
// count changes.
func (w *worker) step(ctx context.Context, b ps.Batch) (*ps.Future, error) {
	st := b.Lease.State().(*partState)
	push, err := w.batch(ctx, st, b.Lease.Pass, b.Rows)
	if err != nil {
		return nil, err
	}
	w.c.Tick()
	if w.cfg.AfterBatch != nil {
		if err := w.cfg.AfterBatch(b.Lease.Pass, b.Lease.Partition, b.Hi, st.z); err != nil {
			return push, err
		}
	}
	return push, nil
}

// resume checks that the state is the one a lease of pass needs: pass-1's
// if nothing of the lease's piece has been trained in this pass, pass's
// if some (started), and marks it pass's.
func (s *partState) resume(partition int, started bool, pass int) error {
	want := pass - 1
	if started {
		want = pass
	}
	if s.pass != want {
		return fmt.Errorf("%w: partition %d, %s in pass %d, holds pass %d, want %d", errStateLost, partition, map[bool]string{false: "not started", true: "resumed"}[started], pass, s.pass, want)
	}
	s.pass = pass
	return nil
}

// batch trains the documents docs of st's partition and returns the push
// of their count changes: in pass 0 their initial topics' counts, later
// the moves of a Gibbs sweep over them.
func (w *worker) batch(ctx context.Context, st *partState, pass int, docs []int) (*ps.Future, error) {
	keys := w.keys(docs)
	vals := make([]float32, len(keys)*w.k)
	if pass == 0 {
		w.count(st, docs, vals)
	} else if err := w.sweep(ctx, st, pass, docs, keys, vals); err != nil {
		return nil, err
	}
	for _, d := range docs {
		w.tokens += int64(len(w.train.Doc(d)))
	}
	w.docs += int64(len(docs))
	return w.tbl.Push(keys, vals), nil
}

// count adds the counts of docs' topics to vals, the rows of w.keys(docs).
func (w *worker) count(st *partState, docs []int, vals []float32) {
	k := w.k
	totals := vals[len(vals)-k:]
	for _, d := range docs {
		words := w.train.Doc(d)
		for i, t := range st.topics(w.train, d) {
			vals[int(w.pos[words[i]])*k+int(t)]++
			totals[t]++
		}
	}
}

// sweep pulls keys' rows into vals, resamples docs against that copy, and
// leaves in vals the copy minus what was pulled: exactly the moves made.
func (w *worker) sweep(ctx context.Context, st *partState, pass int, docs []int, keys []uint64, vals []float32) error {
	if err := w.tbl.Pull(keys, vals).Wait(ctx); err != nil {
		return fmt.Errorf("lda: pull: %w", err)
	}
	pulled := slices.Clone(vals)
	totals := vals[len(vals)-w.k:]
	for _, d := range docs {
		w.sampler.resample(w.train.Doc(d), st.topics(w.train, d), w.pos, vals, totals, docRNG(w.cfg.Seed, pass, d))
	}
	for i := range vals {
		vals[i] -= pulled[i]
	}
	return nil
}

// keys returns the sorted distinct words of docs and then the totals' key
// V, and points w.pos at each word's row.
func (w *worker) keys(docs []int) []uint64 {
	w.gen++
	var keys []uint64
	for _, d := range docs {
		for _, word := range w.train.Doc(d) {
			if w.stamp[word] != w.gen {
				w.stamp[word] = w.gen
				keys = append(keys, uint64(word))
			}
		}
	}
	slices.Sort(keys)
	for i, key := range keys {
		w.pos[key] = int32(i)
	}
	return append(keys, uint64(w.v))
}

// evaluate pulls the whole table after a pass's barrier and scores it:
// the training log-likelihood per token, the held-out perplexity, and,
// after the last pass, into rep, the topics' top words.
func (w *worker) evaluate(ctx context.Context, test *data.Corpus, vocab []string, last bool, rep *Report) (PassStats, error) {
	wk := make([]float32, (w.v+1)*w.k)
	if err := w.tbl.PullRange(keyspace.Range{Lo: 0, Hi: uint64(w.v) + 1}, wk).Wait(ctx); err != nil {
		return PassStats{}, fmt.Errorf("lda: pull model: %w", err)
	}
	st := PassStats{LogLikelihood: logLikelihood(wk, w.v, w.k, w.cfg.Beta) / float64(w.train.Tokens())}
	if test.Tokens() > 0 {
		st.TestPerplexity = perplexity(test, wk, w.v, w.k, w.cfg.Alpha, w.cfg.Beta, w.cfg.Seed)
	}
	if last {
		rep.Topics = topics(wk, w.v, w.k, vocab)
		if w.cfg.Model != "" {
			if err := Export(w.cfg.Model, wk, w.v, w.k, vocab); err != nil {
				return PassStats{}, err
			}
		}
	}
	return st, nil
}

// topics lists the topics, largest first, each with its most frequent
// words (named from vocab if given).
func topics(wk []float32, v, k int, vocab []string) []Topic {
	ts := make([]Topic, k)
	order := make([]int, k)
	for t := range k {
		order[t] = t
		words := make([]int, 0, v)
		for word := range v {
			if wk[word*k+t] > 0 {
				ts[t].Tokens += int(wk[word*k+t])
				words = append(words, word)
			}
		}
		slices.SortStableFunc(words, func(a, b int) int { return cmp.Compare(wk[b*k+t], wk[a*k+t]) })
		for _, word := range words[:min(topWords, len(words))] {
			if vocab != nil {
				ts[t].Words = append(ts[t].Words, vocab[word])
			} else {
				ts[t].Words = append(ts[t].Words, fmt.Sprintf("#%d", word))
			}
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return ts[b].Tokens - ts[a].Tokens })
	out := make([]Topic, k)
	for i, t := range order {
		out[i] = ts[t]
	}
	return out
}
