package lda

import (
	"github.com/terrace-ml/terrace/data"
)

// seqRun is what the sequential baseline ends with.
type seqRun struct {
	wk     []float32   // v word rows of k counts, then the totals
	z      [][]uint16  // each partition's topics, as partState.z
	ll     []float64   // log p(w | z) per token after each pass
	tokens int64       // tokens sampled or initialised, all passes
	parts  []data.Part // the partitions it visited, in order
}

// sequential is the baseline the tests and benchmarks measure the workers
// against: the same sampler in one process, on a dense word-topic matrix
// that every move updates at once (no staleness), visiting the documents
// in the order one worker would: partition by partition, each in its
// pass's order, from the same initial topics.
func sequential(train *data.Corpus, v, partitions int, cfg Config) *seqRun {
	k := cfg.Topics
	r := &seqRun{wk: make([]float32, (v+1)*k), parts: data.Partition(train.NumDocs(), partitions)}
	states := make([]*partState, len(r.parts))
	for p, part := range r.parts {
		states[p] = newState(train, part, k, cfg.Seed)
		r.z = append(r.z, states[p].z)
	}
	pos := make([]int32, v)
	for w := range pos {
		pos[w] = int32(w)
	}
	totals := r.wk[v*k:]
	s := newSampler(k, v, cfg.Alpha, cfg.Beta)
	for e := range cfg.Passes {
		for p, part := range r.parts {
			for _, d := range part.Order(cfg.Seed, e) {
				words, z := train.Doc(d), states[p].topics(train, d)
				if e == 0 {
					for i, t := range z {
						r.wk[int(words[i])*k+int(t)]++
						totals[t]++
					}
				} else {
					s.resample(words, z, pos, r.wk, totals, docRNG(cfg.Seed, e, d))
				}
				r.tokens += int64(len(words))
			}
		}
		r.ll = append(r.ll, logLikelihood(r.wk, v, k, cfg.Beta)/float64(train.Tokens()))
	}
	return r
}
