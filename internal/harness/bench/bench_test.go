package bench

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
)

// The benchmarks share Wire's and App's internals. Each times its subject
// with b's timer and its baseline outside it, alternating every iteration,
// and reports the baseline's rate and the ratio. They average over the
// iterations, as go test does; Wire and App report medians.

func BenchmarkWirePushPull(b *testing.B)         { benchDense(b, 1, opPushPull) }
func BenchmarkWirePush(b *testing.B)             { benchDense(b, 1, opPush) }
func BenchmarkWirePull(b *testing.B)             { benchDense(b, 1, opPull) }
func BenchmarkWirePushPull2Servers(b *testing.B) { benchDense(b, 2, opPushPull) }

func BenchmarkSparsePush(b *testing.B)       { benchSparse(b, false, false) }
func BenchmarkSparsePull(b *testing.B)       { benchSparse(b, true, false) }
func BenchmarkSparsePushCached(b *testing.B) { benchSparse(b, false, true) }
func BenchmarkSparsePullCached(b *testing.B) { benchSparse(b, true, true) }

// pair is one paired benchmark: prep runs untimed before each iteration,
// then base (timed by hand), then subject (timed by b).
type pair struct {
	prep, base, subject func() error
}

func (p pair) run(b *testing.B) (baseTime time.Duration, err error) {
	var baseCPU, subjectCPU time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		if p.prep != nil {
			if err := p.prep(); err != nil {
				return 0, err
			}
		}
		c0 := processCPU()
		d, err := timed(p.base)
		if err != nil {
			return 0, err
		}
		c1 := processCPU()
		baseTime += d
		b.StartTimer()
		if err := p.subject(); err != nil {
			return 0, err
		}
		b.StopTimer()
		subjectCPU += processCPU() - c1
		baseCPU += c1 - c0
		b.StartTimer()
	}
	b.StopTimer()
	// CPU time (user and system, every thread of the process: both ends
	// and the kernel's copies) per operation barely depends on other
	// tenants' load, where wall time does.
	b.ReportMetric(float64(subjectCPU.Microseconds())/float64(b.N), "cpu_us/op")
	b.ReportMetric(float64(baseCPU.Microseconds())/float64(b.N), "base_cpu_us/op")
	return baseTime, nil
}

// benchDense measures op on the default dense vector against the raw TCP
// round trip of the same vector.
func benchDense(b *testing.B, servers int, op denseOp) {
	o, err := WireOptions{}.withDefaults()
	if err != nil {
		b.Fatal(err)
	}
	nb := o.DenseBytes
	ctx := context.Background()
	raw, err := newRawPair(ctx, nb)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	vals, dst := denseVectors(nb / 4)
	err = onWorker(ctx, servers, logger(b.Output()), func(ctx context.Context, _ *node.Local, c *ps.Client) error {
		d, err := newDense(ctx, c, vals, dst)
		if err != nil {
			return err
		}
		if err := d.do(ctx, opPushPull); err != nil { // creates the keys
			return err
		}
		if err := raw.round(nb, nb); err != nil {
			return err
		}
		b.SetBytes(op.bytes(nb))
		baseTime, err := pair{
			base:    func() error { return raw.round(nb, nb) },
			subject: func() error { return d.do(ctx, op) },
		}.run(b)
		if err != nil {
			return err
		}
		rawRate := mbps(opPushPull.bytes(nb)*int64(b.N), baseTime)
		b.ReportMetric(rawRate, "raw_MB/s")
		b.ReportMetric(mbps(op.bytes(nb)*int64(b.N), b.Elapsed())/rawRate, "ratio")
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// benchSparse measures one push or pull of fresh random keys against a raw
// TCP round trip of the same payload bytes, or, cached, one push or pull
// of a repeated key list against the same operation on fresh keys (the
// ratio is then the key cache's speed-up).
func benchSparse(b *testing.B, pull, cached bool) {
	o, err := WireOptions{}.withDefaults()
	if err != nil {
		b.Fatal(err)
	}
	n := o.SparseKeys
	ctx := context.Background()
	raw, err := newRawPair(ctx, 12*n)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	err = onWorker(ctx, 1, logger(b.Output()), func(ctx context.Context, _ *node.Local, c *ps.Client) error {
		s, err := newSparse(ctx, c, n, o.SparseSpace, o.Seed)
		if err != nil {
			return err
		}
		op, req, reply := s.push, 12*n, 0
		if pull {
			op, req, reply = s.pull, 8*n, 4*n
		}
		fixed, fresh := s.freshKeys(), s.freshKeys()
		for range 3 { // see sparseRounds
			if err := op(ctx, fixed); err != nil {
				return err
			}
		}
		p := pair{
			prep:    func() error { fresh = s.freshKeys(); return nil },
			base:    func() error { return raw.round(req, reply) },
			subject: func() error { return op(ctx, fresh) },
		}
		baseName := "raw_keys/s"
		if cached {
			p.base, p.subject = p.subject, func() error { return op(ctx, fixed) }
			baseName = "fresh_keys/s"
		}
		baseTime, err := p.run(b)
		if err != nil {
			return err
		}
		keys := n * b.N
		baseRate, rate := perSec(keys, baseTime), perSec(keys, b.Elapsed())
		b.ReportMetric(rate, "keys/s")
		b.ReportMetric(baseRate, baseName)
		b.ReportMetric(rate/baseRate, "ratio")
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkLR times lr through the parameter server (b's ns/op also
// counts starting the cluster and loading the data; read ps_ex/s) against
// the local loop; each iteration is one App repeat.
func BenchmarkLR(b *testing.B) {
	o, err := AppOptions{}.withDefaults()
	if err != nil {
		b.Fatal(err)
	}
	train, test, err := readData(o)
	if err != nil {
		b.Fatal(err)
	}
	cfg := appConfig(o)
	ctx := context.Background()
	var loc, psr AppRun
	var local, remote []float64
	_, err = pair{
		base: func() (err error) {
			loc, err = runLocal(train, test, cfg)
			local = append(local, loc.ExamplesPerSecond)
			return err
		},
		subject: func() (err error) {
			psr, _, err = runPS(ctx, cfg, logger(b.Output()))
			remote = append(remote, psr.ExamplesPerSecond)
			return err
		},
	}.run(b)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(medianFloat(remote), "ps_ex/s")
	b.ReportMetric(medianFloat(local), "local_ex/s")
	b.ReportMetric(medianFloat(remote)/medianFloat(local), "ratio")
	b.ReportMetric(psr.TestAUC, "ps_auc")
	b.ReportMetric(loc.TestAUC, "local_auc")
}

func TestRawPairEchoes(t *testing.T) {
	p, err := newRawPair(context.Background(), 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]int{{1 << 16, 1 << 16}, {100, 0}, {0, 50}, {3, 3}} {
		clear(p.recv)
		if err := p.round(r[0], r[1]); err != nil {
			t.Fatal(err)
		}
		if r[0] == r[1] && !slices.Equal(p.recv[:r[1]], p.send[:r[0]]) {
			t.Fatalf("round %v: reply differs from request", r)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDenseRoundTrip checks that the dense operations the benchmark times
// do what they claim: every push lands once and pulls read it back.
func TestDenseRoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := 300_000 // several frames
	vals, dst := denseVectors(n)
	err := onWorker(ctx, 2, logger(t.Output()), func(ctx context.Context, _ *node.Local, c *ps.Client) error {
		d, err := newDense(ctx, c, vals, dst)
		if err != nil {
			return err
		}
		for _, op := range []denseOp{opPushPull, opPush, opPull} {
			if err := d.do(ctx, op); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range dst {
		if dst[i] != 2*vals[i] {
			t.Fatalf("key %d: pulled %v after pushing %v twice", i, dst[i], vals[i])
		}
	}
}

func TestFreshKeys(t *testing.T) {
	s := &sparse{n: 1000, space: 2000}
	s.rng = newSparseRand(7)
	for range 5 {
		keys := s.freshKeys()
		if len(keys) != s.n || keys[len(keys)-1] >= s.space {
			t.Fatalf("%d keys, last %d; want %d below %d", len(keys), keys[len(keys)-1], s.n, s.space)
		}
		for i := 1; i < len(keys); i++ {
			if keys[i] <= keys[i-1] {
				t.Fatalf("keys not sorted and unique at %d", i)
			}
		}
	}
}

// TestWireOptionsRefused: sizes the run cannot hold or measure are
// refused before anything runs; a dense vector of 100 TB was allocated
// and the process died out of memory.
func TestWireOptionsRefused(t *testing.T) {
	for _, o := range []WireOptions{{DenseBytes: 3}, {DenseBytes: MaxDenseBytes + 4}, {DenseBytes: 99999999999996}, {Rounds: -1}} {
		if _, err := o.withDefaults(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	if _, err := (WireOptions{DenseBytes: MaxDenseBytes}).withDefaults(); err != nil {
		t.Errorf("the largest dense size: %v", err)
	}
}

// TestAppOptionsRefused: a negative scrape interval ran the benchmark
// without its scraped side, as 0 does, without a word.
func TestAppOptionsRefused(t *testing.T) {
	for _, o := range []AppOptions{{Train: "a", Test: "b", ScrapeEvery: -time.Second}, {Train: "a", Test: "b", Epochs: -1}} {
		if _, err := o.withDefaults(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

func TestWireSmall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Wire(ctx, WireOptions{DenseBytes: 1 << 20, Rounds: 2, SparseKeys: 500, SparseSpace: 100_000, SparseOps: 3}, t.Output())
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Summary())
	for name, v := range map[string]float64{
		"raw_tcp": rep.RawTCPMBps, "push_pull": rep.PushPullMBps, "ratio": rep.Ratio, "push": rep.PushMBps,
		"pull": rep.PullMBps, "push_pull_2s": rep.PushPull2sMBps, "ratio_2s": rep.Ratio2s,
		"sparse_push": rep.SparsePushKeysPerSec, "sparse_pull": rep.SparsePullKeysPerSec,
		"sparse_cached_push": rep.SparseCachedPushKeysPerSec, "sparse_cached_pull": rep.SparseCachedPullKeysPerSec,
		"sparse_raw_push": rep.SparseRawPushKeysPerSec, "sparse_raw_pull": rep.SparseRawPullKeysPerSec,
		"sparse_push_ratio": rep.SparsePushRatio, "sparse_pull_ratio": rep.SparsePullRatio,
		"bytes_per_value": rep.ServerBytesPerValue,
	} {
		positiveFinite(t, name, v)
	}
	if rep.Rounds != 2 || rep.GoVersion == "" || rep.GOMAXPROCS < 1 || rep.Timestamp.IsZero() {
		t.Errorf("report header not filled in: %+v", rep)
	}
	checkJSON(t, rep, "raw_tcp_mb_s", "push_pull_mb_s", "ratio", "push_mb_s", "pull_mb_s", "push_pull_2s_mb_s",
		"sparse_push_keys_s", "sparse_pull_keys_s", "sparse_cached_push_keys_s", "server_bytes_per_value",
		"rounds", "go_version", "gomaxprocs", "timestamp")
}

func TestAppSmall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := App(ctx, AppOptions{Epochs: 1, Repeats: 1}, t.Output())
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Summary())
	for name, v := range map[string]float64{"ps": rep.PSExamplesPerSec, "local": rep.LocalExamplesPerSec, "ratio": rep.Ratio} {
		positiveFinite(t, name, v)
	}
	// Both sides run the same algorithm on the same minibatches; only
	// lr's prefetch makes the parameter server's weights one step stale.
	for name, auc := range map[string]float64{"ps": rep.PSTestAUC, "local": rep.LocalTestAUC} {
		if !(auc > 0.85 && auc <= 1) {
			t.Errorf("%s test AUC %v after one epoch of a9a, want above 0.85", name, auc)
		}
	}
	if d := math.Abs(rep.PSTestAUC - rep.LocalTestAUC); d > 0.01 {
		t.Errorf("test AUCs differ by %.4f: ps %.4f, local %.4f", d, rep.PSTestAUC, rep.LocalTestAUC)
	}
	for _, r := range rep.Runs {
		if r.Examples != 32561 {
			t.Errorf("%s run trained on %d examples, want one epoch of a9a (32561)", r.Side, r.Examples)
		}
	}
	checkJSON(t, rep, "ps_examples_s", "local_examples_s", "ratio", "ps_test_auc", "local_test_auc", "go_version", "gomaxprocs", "timestamp")
}

// TestFull runs the full Wire and App when TERRACE_BENCH_FULL is set, and
// writes wire.json and app.json into the directory it names ("1" for no
// files), for docs/bench.md.
func TestFull(t *testing.T) {
	dir := os.Getenv("TERRACE_BENCH_FULL")
	if dir == "" {
		t.Skip("set TERRACE_BENCH_FULL to run the full benchmarks")
	}
	ctx := context.Background()
	wr, err := Wire(ctx, WireOptions{}, t.Output())
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + wr.Summary())
	ar, err := App(ctx, AppOptions{}, t.Output())
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + ar.Summary())
	if dir == "1" {
		return
	}
	for name, rep := range map[string]any{"wire.json": wr, "app.json": ar} {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func positiveFinite(t *testing.T, name string, v float64) {
	t.Helper()
	if !(v > 0) || math.IsInf(v, 0) {
		t.Errorf("%s = %v, want positive and finite", name, v)
	}
}

func checkJSON(t *testing.T, rep any, keys ...string) {
	t.Helper()
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("report JSON lacks %q: %s", k, b)
		}
	}
}

// The stragglers benchmark's progress lines name each metric, in name
// order, instead of printing a Go map.
func TestMetricWords(t *testing.T) {
	got := metricWords(map[string]float64{"test_auc": 0.90123, "test_accuracy": 0.849})
	if want := " test_accuracy 0.8490 test_auc 0.9012"; got != want {
		t.Fatalf("metricWords = %q, want %q", got, want)
	}
}

// TestAppOutsideModuleNamesFlags: run outside a clone with no data given,
// App says which flags give the data (it once said "pass the data paths").
func TestAppOutsideModuleNamesFlags(t *testing.T) {
	t.Chdir(t.TempDir())
	_, err := AppOptions{}.withDefaults()
	if err == nil || !strings.Contains(err.Error(), "--train and --test") {
		t.Fatalf("withDefaults outside the module: %v, want an error naming --train and --test", err)
	}
}
