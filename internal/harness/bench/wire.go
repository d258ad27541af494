package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// WireOptions size the wire benchmark; zero fields take the defaults.
type WireOptions struct {
	// DenseBytes is the size of the dense vector (64 MiB): DenseBytes/4
	// float32 keys of a width-1 sum table.
	DenseBytes int
	// Rounds is how many timed rounds every figure takes (5). The report
	// gives the median round, for the baseline and the subject alike.
	Rounds int
	// SparseKeys is how many keys one sparse operation carries (10,000),
	// drawn from [0, SparseSpace) (10,000,000).
	SparseKeys  int
	SparseSpace uint64
	// SparseOps is how many sparse operations make one timed round (50).
	SparseOps int
	// Seed seeds the sparse key sets (1 if 0).
	Seed uint64
	// Step, when set, hears after each timed round how many of the total
	// (dense and sparse) are done (for a progress bar).
	Step func(done, total int)
}

func (o WireOptions) step(done int) {
	if o.Step != nil {
		o.Step(done, 2*o.Rounds)
	}
}

// MaxDenseBytes bounds WireOptions.DenseBytes, 16 times the default: the
// worker's vector, its pull destination, the server's table and the raw
// baseline's buffers are each of that size (--dense-bytes 99999999999996
// died with "fatal error: runtime: out of memory").
const MaxDenseBytes = 1 << 30

func (o WireOptions) withDefaults() (WireOptions, error) {
	if o.DenseBytes == 0 {
		o.DenseBytes = 64 << 20
	}
	if o.Rounds == 0 {
		o.Rounds = 5
	}
	if o.SparseKeys == 0 {
		o.SparseKeys = 10_000
	}
	if o.SparseSpace == 0 {
		o.SparseSpace = 10_000_000
	}
	if o.SparseOps == 0 {
		o.SparseOps = 50
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	switch {
	case o.DenseBytes < 4 || o.DenseBytes%4 != 0:
		return o, fmt.Errorf("bench: dense size %d is not a positive multiple of 4 bytes", o.DenseBytes)
	case o.DenseBytes > MaxDenseBytes:
		return o, fmt.Errorf("bench: dense size %d is over %d bytes (the run holds several copies of the vector)", o.DenseBytes, MaxDenseBytes)
	case o.Rounds < 1 || o.SparseOps < 1 || o.SparseKeys < 1:
		return o, fmt.Errorf("bench: rounds %d, sparse ops %d and sparse keys %d must be positive", o.Rounds, o.SparseOps, o.SparseKeys)
	case uint64(o.SparseKeys) > o.SparseSpace/2:
		// Drawing unique keys from a space barely larger than the set
		// would take long and measure a nearly dense list.
		return o, fmt.Errorf("bench: %d sparse keys out of %d: the key space must be at least twice the set", o.SparseKeys, o.SparseSpace)
	}
	return o, nil
}

// WireReport is the result of Wire. Rates are medians over the rounds; MB
// is 10^6 bytes, and a push+pull counts the bytes it sends and the bytes it
// receives, as the raw TCP baseline does.
type WireReport struct {
	Rounds      int    `json:"rounds"`
	Statistic   string `json:"statistic"`
	DenseBytes  int    `json:"dense_bytes"`
	SparseKeys  int    `json:"sparse_keys"`
	SparseSpace uint64 `json:"sparse_space"`
	SparseOps   int    `json:"sparse_ops_per_round"`

	// RawTCPMBps is the baseline: a raw loopback copy of DenseBytes there
	// and back.
	RawTCPMBps float64 `json:"raw_tcp_mb_s"`
	// PushPullMBps is a dense PushPullRange of DenseBytes, one server and
	// one worker; Ratio is PushPullMBps/RawTCPMBps.
	PushPullMBps float64 `json:"push_pull_mb_s"`
	Ratio        float64 `json:"ratio"`
	PushMBps     float64 `json:"push_mb_s"`
	PullMBps     float64 `json:"pull_mb_s"`
	// PushPull2sMBps is the same push+pull against two servers;
	// Ratio2s divides it by the same baseline.
	PushPull2sMBps float64 `json:"push_pull_2s_mb_s"`
	Ratio2s        float64 `json:"ratio_2s"`

	// The fair ceilings, timed in the same rounds. DuplexTCPMBps is raw
	// TCP with the push+pull's shape: DenseBytes each way in frames of
	// wire.FrameTarget, both directions in flight, one connection (two for
	// DuplexTCP2cMBps, the 2-server figure's shape). StreamTCPMBps is one
	// way, iperf3-like, in 1 MiB writes (counting the bytes sent). SumMBps
	// is summing DenseBytes of float32 into as many, and CRCMBps a CRC32C
	// pass over them (MB of the vector per second).
	DuplexTCPMBps   float64 `json:"duplex_tcp_mb_s"`
	DuplexTCP2cMBps float64 `json:"duplex_tcp_2c_mb_s"`
	StreamTCPMBps   float64 `json:"stream_tcp_mb_s"`
	SumMBps         float64 `json:"sum_mb_s"`
	CRCMBps         float64 `json:"crc_mb_s"`
	// RatioDuplex is PushPullMBps/DuplexTCPMBps; Ratio2sDuplex is
	// PushPull2sMBps/DuplexTCP2cMBps; Ratio2sTo1s is PushPull2sMBps/PushPullMBps.
	RatioDuplex   float64 `json:"ratio_duplex"`
	Ratio2sDuplex float64 `json:"ratio_2s_duplex"`
	Ratio2sTo1s   float64 `json:"ratio_2s_to_1s"`
	// CPU milliseconds (user and system, the whole process: both ends and
	// the kernel's copies) per operation, median over the rounds. Other
	// tenants' load moves wall time far more than these, so compare
	// versions by them on a shared machine. CPURatioDuplex is the duplex
	// copy's CPU over the push+pull's: the share of the path's CPU that
	// moving the bytes takes.
	DuplexCPUms     float64 `json:"duplex_cpu_ms"`
	PushPullCPUms   float64 `json:"push_pull_cpu_ms"`
	PushCPUms       float64 `json:"push_cpu_ms"`
	PullCPUms       float64 `json:"pull_cpu_ms"`
	PushPull2sCPUms float64 `json:"push_pull_2s_cpu_ms"`
	CPURatioDuplex  float64 `json:"cpu_ratio_duplex"`

	// Sparse rates are keys per second of back-to-back operations, each
	// waited for before the next, on fresh random key sets (each list seen
	// once) or on one repeated set (sent once, then named by its cache id).
	SparsePushKeysPerSec       float64 `json:"sparse_push_keys_s"`
	SparsePullKeysPerSec       float64 `json:"sparse_pull_keys_s"`
	SparseCachedPushKeysPerSec float64 `json:"sparse_cached_push_keys_s"`
	SparseCachedPullKeysPerSec float64 `json:"sparse_cached_pull_keys_s"`
	// The sparse baselines are raw TCP round trips of the same payload
	// bytes: 12 bytes a key out for a push (key and value); 8 out and 4
	// back for a pull.
	SparseRawPushKeysPerSec float64 `json:"sparse_raw_push_keys_s"`
	SparseRawPullKeysPerSec float64 `json:"sparse_raw_pull_keys_s"`
	SparsePushRatio         float64 `json:"sparse_push_ratio"`
	SparsePullRatio         float64 `json:"sparse_pull_ratio"`

	// ServerBytesPerValue is the one server's memory per stored value after
	// the dense rounds (4 is the floor for a sum table of float32s).
	ServerBytesPerValue float64 `json:"server_bytes_per_value"`

	GoVersion  string    `json:"go_version"`
	GOMAXPROCS int       `json:"gomaxprocs"`
	NumCPU     int       `json:"num_cpu"`
	Timestamp  time.Time `json:"timestamp"`
	Seconds    float64   `json:"seconds"`
}

// Summary is the report for people.
func (r *WireReport) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "wire benchmark, %s of %d rounds, %s, GOMAXPROCS %d, %s\n", r.Statistic, r.Rounds, r.GoVersion, r.GOMAXPROCS, r.Timestamp.Format(time.RFC3339))
	fmt.Fprintf(&b, "dense %g MiB (%d keys), MB/s counting both directions:\n", float64(r.DenseBytes)/(1<<20), r.DenseBytes/4)
	fmt.Fprintf(&b, "  raw tcp (there, then back) %8.0f MB/s\n", r.RawTCPMBps)
	fmt.Fprintf(&b, "  duplex tcp, 1 conn         %8.0f MB/s  (the push+pull ceiling)\n", r.DuplexTCPMBps)
	fmt.Fprintf(&b, "  duplex tcp, 2 conns        %8.0f MB/s\n", r.DuplexTCP2cMBps)
	fmt.Fprintf(&b, "  stream tcp, 1 MiB writes   %8.0f MB/s  (one way)\n", r.StreamTCPMBps)
	fmt.Fprintf(&b, "  sum 64 MiB into 64 MiB     %8.0f MB/s\n", r.SumMBps)
	fmt.Fprintf(&b, "  crc32c                     %8.0f MB/s\n", r.CRCMBps)
	fmt.Fprintf(&b, "  push+pull 1s1w             %8.0f MB/s  ratio %.2f, of duplex %.2f\n", r.PushPullMBps, r.Ratio, r.RatioDuplex)
	fmt.Fprintf(&b, "  push      1s1w             %8.0f MB/s\n", r.PushMBps)
	fmt.Fprintf(&b, "  pull      1s1w             %8.0f MB/s\n", r.PullMBps)
	fmt.Fprintf(&b, "  push+pull 2s1w             %8.0f MB/s  ratio %.2f, of duplex 2 conns %.2f, of 1s1w %.2f\n", r.PushPull2sMBps, r.Ratio2s, r.Ratio2sDuplex, r.Ratio2sTo1s)
	fmt.Fprintf(&b, "  cpu ms per op: duplex %.0f, push+pull %.0f, push %.0f, pull %.0f, push+pull 2s %.0f (duplex/push+pull %.2f)\n",
		r.DuplexCPUms, r.PushPullCPUms, r.PushCPUms, r.PullCPUms, r.PushPull2sCPUms, r.CPURatioDuplex)
	fmt.Fprintf(&b, "  server memory       %8.2f bytes/value\n", r.ServerBytesPerValue)
	fmt.Fprintf(&b, "sparse %d keys of %d, keys/s, each op waited:\n", r.SparseKeys, r.SparseSpace)
	fmt.Fprintf(&b, "  push fresh keys     %10.0f  (raw tcp %10.0f, ratio %.3f)\n", r.SparsePushKeysPerSec, r.SparseRawPushKeysPerSec, r.SparsePushRatio)
	fmt.Fprintf(&b, "  pull fresh keys     %10.0f  (raw tcp %10.0f, ratio %.3f)\n", r.SparsePullKeysPerSec, r.SparseRawPullKeysPerSec, r.SparsePullRatio)
	fmt.Fprintf(&b, "  push cached keys    %10.0f\n", r.SparseCachedPushKeysPerSec)
	fmt.Fprintf(&b, "  pull cached keys    %10.0f\n", r.SparseCachedPullKeysPerSec)
	return b.String()
}

// Wire measures the data plane: dense push, pull and push+pull through
// local clusters of one and two servers, sparse push and pull with and
// without the key cache, and the server's memory per value, each against a
// raw TCP copy of the same bytes timed in the same rounds.
func Wire(ctx context.Context, o WireOptions, progress io.Writer) (*WireReport, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	w := orDiscard(progress)
	start := time.Now()
	rep := &WireReport{
		Rounds: o.Rounds, Statistic: "median", DenseBytes: o.DenseBytes,
		SparseKeys: o.SparseKeys, SparseSpace: o.SparseSpace, SparseOps: o.SparseOps,
		GoVersion: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(), Timestamp: start.UTC(),
	}
	raw, err := newRawPair(ctx, max(o.DenseBytes, 12*o.SparseKeys))
	if err != nil {
		return nil, err
	}
	defer raw.Close()
	ceil, err := newCeilings(ctx, o.DenseBytes)
	if err != nil {
		return nil, err
	}
	defer ceil.Close()
	vals, dst := denseVectors(o.DenseBytes / 4)
	log := logger(w)
	err = onWorker(ctx, 1, log, func(ctx context.Context, l1 *node.Local, c1 *ps.Client) error {
		d1, err := newDense(ctx, c1, vals, dst)
		if err != nil {
			return err
		}
		err = onWorker(ctx, 2, log, func(ctx context.Context, _ *node.Local, c2 *ps.Client) error {
			d2, err := newDense(ctx, c2, vals, dst)
			if err != nil {
				return err
			}
			return denseRounds(ctx, o, raw, ceil, d1, d2, rep, w)
		})
		if err != nil {
			return err
		}
		// Before the sparse table exists, so that only the dense table counts.
		rep.ServerBytesPerValue = l1.Servers[0].Stats().BytesPerValue
		fmt.Fprintf(w, "server memory after the dense rounds: %.2f bytes/value\n", rep.ServerBytesPerValue)
		return sparseRounds(ctx, o, raw, c1, rep, w)
	})
	if err != nil {
		return nil, fmt.Errorf("bench: wire: %w", err)
	}
	if err := raw.Close(); err != nil {
		return nil, err
	}
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

// denseRounds interleaves the baseline and every dense figure within each
// round, so that a burst of load from other tenants hits them all.
func denseRounds(ctx context.Context, o WireOptions, raw *rawPair, ceil *ceilings, d1, d2 *dense, rep *WireReport, w io.Writer) error {
	nb := o.DenseBytes
	fmt.Fprintf(w, "dense: warming up (the first round creates %d keys)\n", nb/4)
	if err := d1.do(ctx, opPushPull); err != nil {
		return err
	}
	if err := d2.do(ctx, opPushPull); err != nil {
		return err
	}
	if err := raw.round(nb, nb); err != nil {
		return err
	}
	if _, err := ceil.round(nb); err != nil {
		return err
	}
	var tRaw, tPP, tPush, tPull, tPP2 []time.Duration
	var cPP, cPush, cPull, cPP2 []time.Duration
	var tc []ceilingTimes
	for r := range o.Rounds {
		d, err := timed(func() error { return raw.round(nb, nb) })
		if err != nil {
			return err
		}
		tRaw = append(tRaw, d)
		ct, err := ceil.round(nb)
		if err != nil {
			return err
		}
		tc = append(tc, ct)
		for _, m := range []struct {
			d   *dense
			op  denseOp
			to  *[]time.Duration
			cpu *[]time.Duration
		}{{d1, opPushPull, &tPP, &cPP}, {d1, opPush, &tPush, &cPush}, {d1, opPull, &tPull, &cPull}, {d2, opPushPull, &tPP2, &cPP2}} {
			c0 := processCPU()
			d, err := timed(func() error { return m.d.do(ctx, m.op) })
			if err != nil {
				return err
			}
			*m.cpu = append(*m.cpu, processCPU()-c0)
			*m.to = append(*m.to, d)
		}
		fmt.Fprintf(w, "dense round %d/%d: raw %.0f, duplex %.0f, duplex 2c %.0f, stream %.0f, sum %.0f, crc %.0f, push+pull %.0f, push %.0f, pull %.0f, push+pull 2s %.0f MB/s\n", r+1, o.Rounds,
			mbps(opPushPull.bytes(nb), tRaw[r]), mbps(2*int64(nb), ct.duplex), mbps(2*int64(nb), ct.duplex2), mbps(int64(nb), ct.stream),
			mbps(int64(nb), ct.sum), mbps(int64(nb), ct.crc), mbps(opPushPull.bytes(nb), tPP[r]), mbps(opPush.bytes(nb), tPush[r]),
			mbps(opPull.bytes(nb), tPull[r]), mbps(opPushPull.bytes(nb), tPP2[r]))
		o.step(r + 1)
	}
	rep.RawTCPMBps = mbps(opPushPull.bytes(nb), median(tRaw))
	rep.PushPullMBps = mbps(opPushPull.bytes(nb), median(tPP))
	rep.PushMBps = mbps(opPush.bytes(nb), median(tPush))
	rep.PullMBps = mbps(opPull.bytes(nb), median(tPull))
	rep.PushPull2sMBps = mbps(opPushPull.bytes(nb), median(tPP2))
	rep.Ratio = rep.PushPullMBps / rep.RawTCPMBps
	rep.Ratio2s = rep.PushPull2sMBps / rep.RawTCPMBps
	pick := func(f func(ceilingTimes) time.Duration) time.Duration {
		ds := make([]time.Duration, len(tc))
		for i, c := range tc {
			ds[i] = f(c)
		}
		return median(ds)
	}
	ms := func(ds []time.Duration) float64 { return float64(median(ds).Microseconds()) / 1000 }
	rep.DuplexCPUms = ms(func() (ds []time.Duration) {
		for _, c := range tc {
			ds = append(ds, c.duplexCPU)
		}
		return ds
	}())
	rep.PushPullCPUms, rep.PushCPUms, rep.PullCPUms, rep.PushPull2sCPUms = ms(cPP), ms(cPush), ms(cPull), ms(cPP2)
	rep.CPURatioDuplex = rep.DuplexCPUms / rep.PushPullCPUms
	rep.DuplexTCPMBps = mbps(2*int64(nb), pick(func(c ceilingTimes) time.Duration { return c.duplex }))
	rep.DuplexTCP2cMBps = mbps(2*int64(nb), pick(func(c ceilingTimes) time.Duration { return c.duplex2 }))
	rep.StreamTCPMBps = mbps(int64(nb), pick(func(c ceilingTimes) time.Duration { return c.stream }))
	rep.SumMBps = mbps(int64(nb), pick(func(c ceilingTimes) time.Duration { return c.sum }))
	rep.CRCMBps = mbps(int64(nb), pick(func(c ceilingTimes) time.Duration { return c.crc }))
	rep.RatioDuplex = rep.PushPullMBps / rep.DuplexTCPMBps
	rep.Ratio2sDuplex = rep.PushPull2sMBps / rep.DuplexTCP2cMBps
	rep.Ratio2sTo1s = rep.PushPull2sMBps / rep.PushPullMBps
	return nil
}

func sparseRounds(ctx context.Context, o WireOptions, raw *rawPair, c *ps.Client, rep *WireReport, w io.Writer) error {
	s, err := newSparse(ctx, c, o.SparseKeys, o.SparseSpace, o.Seed)
	if err != nil {
		return err
	}
	n := o.SparseKeys
	fixed := s.freshKeys()
	// Twice to turn the client's key caching on, once more to register
	// the list with the server.
	for range 3 {
		if err := s.push(ctx, fixed); err != nil {
			return err
		}
	}
	var tPush, tPull, tCPush, tCPull, tRawPush, tRawPull []time.Duration
	for r := range o.Rounds {
		pushSets, pullSets := s.freshSets(o.SparseOps), s.freshSets(o.SparseOps)
		type phase struct {
			to *[]time.Duration
			op func(i int) error
		}
		for _, ph := range []phase{
			{&tRawPush, func(int) error { return raw.round(12*n, 0) }},
			{&tPush, func(i int) error { return s.push(ctx, pushSets[i]) }},
			{&tRawPull, func(int) error { return raw.round(8*n, 4*n) }},
			{&tPull, func(i int) error { return s.pull(ctx, pullSets[i]) }},
			{&tCPush, func(int) error { return s.push(ctx, fixed) }},
			{&tCPull, func(int) error { return s.pull(ctx, fixed) }},
		} {
			d, err := timed(func() error {
				for i := range o.SparseOps {
					if err := ph.op(i); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			*ph.to = append(*ph.to, d)
		}
		keys := o.SparseOps * n
		fmt.Fprintf(w, "sparse round %d/%d: push %.0f (raw %.0f), pull %.0f (raw %.0f), cached push %.0f, cached pull %.0f keys/s\n", r+1, o.Rounds,
			perSec(keys, tPush[r]), perSec(keys, tRawPush[r]), perSec(keys, tPull[r]), perSec(keys, tRawPull[r]), perSec(keys, tCPush[r]), perSec(keys, tCPull[r]))
		o.step(o.Rounds + r + 1)
	}
	keys := o.SparseOps * n
	rep.SparsePushKeysPerSec = perSec(keys, median(tPush))
	rep.SparsePullKeysPerSec = perSec(keys, median(tPull))
	rep.SparseCachedPushKeysPerSec = perSec(keys, median(tCPush))
	rep.SparseCachedPullKeysPerSec = perSec(keys, median(tCPull))
	rep.SparseRawPushKeysPerSec = perSec(keys, median(tRawPush))
	rep.SparseRawPullKeysPerSec = perSec(keys, median(tRawPull))
	rep.SparsePushRatio = rep.SparsePushKeysPerSec / rep.SparseRawPushKeysPerSec
	rep.SparsePullRatio = rep.SparsePullKeysPerSec / rep.SparseRawPullKeysPerSec
	return nil
}

// denseOp is one of the dense operations measured.
type denseOp int

const (
	opPushPull denseOp = iota
	opPush
	opPull
)

// bytes is how many bytes of values op moves for a vector of nb bytes.
func (op denseOp) bytes(nb int) int64 {
	if op == opPushPull {
		return 2 * int64(nb)
	}
	return int64(nb)
}

// dense is one worker's dense vector over the keys [0, len(vals)) of a
// width-1 sum table under ASP, so that no clock ever holds an operation back.
type dense struct {
	tbl       *ps.Table
	r         keyspace.Range
	vals, dst []float32
}

const denseTable = "bench.dense"

func newDense(ctx context.Context, c *ps.Client, vals, dst []float32) (*dense, error) {
	tbl, err := c.CreateTable(ctx, table.Spec{Name: denseTable, Width: 1, Rule: table.Rule{Kind: table.Sum}, Consistency: table.Consistency{Model: table.ASP}})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return &dense{tbl: tbl, r: keyspace.Range{Lo: 0, Hi: uint64(len(vals))}, vals: vals, dst: dst}, nil
}

// denseVectors returns the values pushed (small, so that summing them
// round after round stays finite and exact enough) and the pull buffer.
func denseVectors(n int) (vals, dst []float32) {
	vals, dst = make([]float32, n), make([]float32, n)
	for i := range vals {
		vals[i] = float32(i%7) * 0.125
	}
	return vals, dst
}

func (d *dense) do(ctx context.Context, op denseOp) error {
	var f *ps.Future
	switch op {
	case opPushPull:
		f = d.tbl.PushPullRange(d.r, d.vals, d.dst)
	case opPush:
		f = d.tbl.PushRange(d.r, d.vals)
	case opPull:
		f = d.tbl.PullRange(d.r, d.dst)
	}
	if err := f.Wait(ctx); err != nil {
		return fmt.Errorf("bench: dense %s of %d keys: %w", op, d.r.Len(), err)
	}
	return nil
}

func (op denseOp) String() string {
	switch op {
	case opPushPull:
		return "push+pull"
	case opPush:
		return "push"
	}
	return "pull"
}

// sparse pushes and pulls sets of random keys of a width-1 sum table.
type sparse struct {
	tbl       *ps.Table
	rng       *rand.Rand
	n         int
	space     uint64
	vals, dst []float32
}

const sparseTable = "bench.sparse"

func newSparse(ctx context.Context, c *ps.Client, n int, space, seed uint64) (*sparse, error) {
	tbl, err := c.CreateTable(ctx, table.Spec{Name: sparseTable, Width: 1, Rule: table.Rule{Kind: table.Sum}, Consistency: table.Consistency{Model: table.ASP}})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	s := &sparse{tbl: tbl, rng: newSparseRand(seed), n: n, space: space, vals: make([]float32, n), dst: make([]float32, n)}
	for i := range s.vals {
		s.vals[i] = 0.25
	}
	return s, nil
}

func newSparseRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x7e77ace)) }

// freshKeys draws n distinct keys, sorted. Only the shortfall is redrawn
// after removing duplicates, so the set stays uniform.
func (s *sparse) freshKeys() []uint64 {
	keys := make([]uint64, 0, s.n)
	for len(keys) < s.n {
		for range s.n - len(keys) {
			keys = append(keys, s.rng.Uint64N(s.space))
		}
		slices.Sort(keys)
		keys = slices.Compact(keys)
	}
	return keys
}

// freshSets draws the key sets of one round before it is timed.
func (s *sparse) freshSets(ops int) [][]uint64 {
	sets := make([][]uint64, ops)
	for i := range sets {
		sets[i] = s.freshKeys()
	}
	return sets
}

func (s *sparse) push(ctx context.Context, keys []uint64) error {
	if err := s.tbl.Push(keys, s.vals).Wait(ctx); err != nil {
		return fmt.Errorf("bench: sparse push of %d keys: %w", len(keys), err)
	}
	return nil
}

func (s *sparse) pull(ctx context.Context, keys []uint64) error {
	if err := s.tbl.Pull(keys, s.dst).Wait(ctx); err != nil {
		return fmt.Errorf("bench: sparse pull of %d keys: %w", len(keys), err)
	}
	return nil
}

func timed(fn func() error) (time.Duration, error) {
	t := time.Now()
	err := fn()
	return time.Since(t), err
}

// median of durations; the mean of the middle two for an even count.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 0 {
		return (s[m-1] + s[m]) / 2
	}
	return s[m]
}

func mbps(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return math.Inf(1)
	}
	return float64(bytes) / 1e6 / d.Seconds()
}

func perSec(n int, d time.Duration) float64 {
	if d <= 0 {
		return math.Inf(1)
	}
	return float64(n) / d.Seconds()
}
