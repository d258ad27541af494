package lda

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/ps"
)

// BenchmarkTokensPerSecond trains KOS with the defaults, 10 passes, once
// on a local cluster of two servers and two workers and once with the
// sequential sampler in this process, and reports both rates (tokens
// initialised or resampled, per second of wall time, the distributed
// run's including its per-pass evaluation on rank 0) and their ratio.
// On one machine the workers share its cores with the servers, so the
// ratio measures the parameter server's overhead more than any speed-up.
func BenchmarkTokensPerSecond(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Train, cfg.Passes = kosDocWords, 10
	corpus, err := data.ReadDocWords(cfg.Train)
	if err != nil {
		b.Fatal(err)
	}
	train, _ := split(corpus, cfg.HoldOut)
	var seqTokens, distTokens int64
	var seqTime, distTime time.Duration
	for b.Loop() {
		start := time.Now()
		seqTokens += sequential(train, corpus.NumWords, 8, cfg).tokens
		seqTime += time.Since(start)

		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		l := localCluster(b, ctx, 2, 2, 8)
		start = time.Now()
		reps, errs := runWorkers(ctx, l, 2, func(ctx context.Context, c *ps.Client) (*Report, error) { return Run(ctx, c, cfg) })
		distTime += time.Since(start)
		cancel()
		if err := errors.Join(errs...); err != nil {
			b.Fatal(err)
		}
		for _, r := range reps {
			distTokens += r.Tokens
		}
	}
	seq := float64(seqTokens) / seqTime.Seconds()
	dist := float64(distTokens) / distTime.Seconds()
	b.ReportMetric(seq, "seq_tokens/s")
	b.ReportMetric(dist, "dist_tokens/s")
	b.ReportMetric(dist/seq, "dist/seq")
}
