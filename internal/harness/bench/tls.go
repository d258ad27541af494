package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/terrace-ml/terrace/apps/lr"
	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/internal/security/pki"
	"github.com/terrace-ml/terrace/internal/security/tlsnet"
	"github.com/terrace-ml/terrace/ps"
)

// TLSReport compares the data plane, or lr, with mutual TLS on every
// connection against plain TCP, in the same run: each round times both.
type TLSReport struct {
	Bench     string `json:"bench"` // "wire" or "app"
	Rounds    int    `json:"rounds"`
	Statistic string `json:"statistic"`
	// Wire: dense push+pull, push and pull of DenseBytes, MB/s, on one
	// server and one worker. App: lr examples/s.
	DenseBytes int     `json:"dense_bytes,omitempty"`
	Plain      Figures `json:"plain"`
	TLS        Figures `json:"tls"`
	// Ratio is TLS over plain of push+pull (wire; target >= 0.7) or of
	// examples/s (app).
	Ratio float64 `json:"ratio"`
	// RoundRatio is the median over rounds of each round's TLS/plain
	// ratio: both sides of a round run back to back, so a burst of load
	// from other tenants moves them together, and this ratio holds still
	// where the medians of each side (and Ratio) swing.
	RoundRatio float64   `json:"round_ratio"`
	Ratios     []float64 `json:"round_ratios"`
	// Wire: the process's CPU (user and system; both ends are in it) per
	// push+pull on each side, medians, and CPURatio, plain's over TLS's:
	// the share of plain throughput TLS keeps where the CPU bounds both,
	// which load from other tenants moves far less than the times.
	PlainCPUms float64 `json:"plain_push_pull_cpu_ms,omitempty"`
	TLSCPUms   float64 `json:"tls_push_pull_cpu_ms,omitempty"`
	CPURatio   float64 `json:"cpu_ratio,omitempty"`
	// AESNI: whether this CPU advertises AES instructions, on which
	// AES-GCM's speed, and so the ratio, depends.
	AESNI      bool      `json:"aes_ni"`
	Cipher     string    `json:"cipher"`
	GoVersion  string    `json:"go_version"`
	GOMAXPROCS int       `json:"gomaxprocs"`
	Timestamp  time.Time `json:"timestamp"`
	Seconds    float64   `json:"seconds"`
}

// Figures are one side's medians.
type Figures struct {
	PushPullMBps      float64 `json:"push_pull_mb_s,omitempty"`
	PushMBps          float64 `json:"push_mb_s,omitempty"`
	PullMBps          float64 `json:"pull_mb_s,omitempty"`
	ExamplesPerSecond float64 `json:"examples_s,omitempty"`
	TestAUC           float64 `json:"test_auc,omitempty"`
}

// Summary is the report for people.
func (r *TLSReport) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s benchmark, TLS against plain TCP, %s of %d rounds, %s, AES-NI %v, %s, GOMAXPROCS %d\n", r.Bench, r.Statistic, r.Rounds, r.Cipher, r.AESNI, r.GoVersion, r.GOMAXPROCS)
	if r.Bench == "wire" {
		fmt.Fprintf(&b, "  dense %d MiB, 1 server 1 worker  push+pull      push      pull (MB/s)\n", r.DenseBytes>>20)
		fmt.Fprintf(&b, "  plain TCP                      %9.0f %9.0f %9.0f\n", r.Plain.PushPullMBps, r.Plain.PushMBps, r.Plain.PullMBps)
		fmt.Fprintf(&b, "  mutual TLS                     %9.0f %9.0f %9.0f\n", r.TLS.PushPullMBps, r.TLS.PushMBps, r.TLS.PullMBps)
		fmt.Fprintf(&b, "  ratio TLS/plain push+pull      %9.2f of the medians, %.2f median of the rounds' (target >= 0.7)\n", r.Ratio, r.RoundRatio)
		fmt.Fprintf(&b, "  cpu ms per push+pull: plain %.0f, TLS %.0f (plain/TLS %.2f)\n", r.PlainCPUms, r.TLSCPUms, r.CPURatio)
		return b.String()
	}
	fmt.Fprintf(&b, "  plain TCP   %10.0f examples/s  test AUC %.4f\n", r.Plain.ExamplesPerSecond, r.Plain.TestAUC)
	fmt.Fprintf(&b, "  mutual TLS  %10.0f examples/s  test AUC %.4f\n", r.TLS.ExamplesPerSecond, r.TLS.TestAUC)
	fmt.Fprintf(&b, "  ratio TLS/plain %6.2f of the medians, %.2f median of the runs'\n", r.Ratio, r.RoundRatio)
	return b.String()
}

func newTLSReport(bench string, rounds int) *TLSReport {
	return &TLSReport{Bench: bench, Rounds: rounds, Statistic: "median", AESNI: hasAESNI(),
		Cipher: "TLS 1.3, ECDSA P-256, AES-128-GCM, terrace-records/1 after the handshake", GoVersion: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0), Timestamp: time.Now().UTC()}
}

// tlsNetworks makes a throw-away cluster CA and gives each node of a
// one-server, one-worker local cluster its own certificate for 127.0.0.1;
// cleanup removes the CA and certificates.
func tlsNetworks(log *slog.Logger) (nets func(id string) transport.Network, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "terrace-bench-pki-")
	if err != nil {
		return nil, nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	if err := pki.Init(dir, "", pki.Options{}); err != nil {
		cleanup()
		return nil, nil, err
	}
	byID := map[string]transport.Network{}
	for _, id := range []string{"coordinator", "server-0", "worker-0"} {
		out, err := pki.Issue(dir, id, []string{"127.0.0.1"}, pki.Options{})
		if err == nil {
			var src *pki.Source
			if src, err = pki.NewSource(pki.FilesIn(out)); err == nil {
				byID[id] = tlsnet.New(nil, src, log)
			}
		}
		if err != nil {
			cleanup()
			return nil, nil, err
		}
	}
	return func(id string) transport.Network {
		if n, ok := byID[id]; ok {
			return n
		}
		return byID["coordinator"]
	}, cleanup, nil
}

// onWorkerNet is onWorker on the given networks (TCP if nil).
func onWorkerNet(ctx context.Context, nw func(string) transport.Network, log *slog.Logger, fn func(ctx context.Context, c *ps.Client) error) (err error) {
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 1, Workers: 1, Logger: log, Network: nw})
	if err != nil {
		return fmt.Errorf("bench: start local cluster: %w", err)
	}
	defer func() {
		if cerr := l.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("bench: stop local cluster: %w", cerr))
		}
	}()
	_, err = l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) { return nil, fn(ctx, c) })
	return err
}

// WireTLS measures dense push+pull, push and pull on one server and one
// worker with mutual TLS against plain TCP, interleaved round by round.
func WireTLS(ctx context.Context, o WireOptions, progress io.Writer) (*TLSReport, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	w := orDiscard(progress)
	start := time.Now()
	rep := newTLSReport("wire", o.Rounds)
	rep.DenseBytes = o.DenseBytes
	log := logger(w)
	nets, cleanup, err := tlsNetworks(log)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	vals, dst := denseVectors(o.DenseBytes / 4)
	nb := o.DenseBytes
	ops := []denseOp{opPushPull, opPush, opPull}
	times := map[bool][][]time.Duration{false: make([][]time.Duration, 3), true: make([][]time.Duration, 3)}
	cpu := map[bool][]time.Duration{}
	err = onWorkerNet(ctx, nil, log, func(ctx context.Context, cp *ps.Client) error {
		plain, err := newDense(ctx, cp, vals, dst)
		if err != nil {
			return err
		}
		return onWorkerNet(ctx, nets, log, func(ctx context.Context, ct *ps.Client) error {
			secure, err := newDense(ctx, ct, vals, dst)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "dense: warming up (the first round creates %d keys on each cluster)\n", nb/4)
			for _, d := range []*dense{plain, secure} {
				if err := d.do(ctx, opPushPull); err != nil {
					return err
				}
			}
			for r := range o.Rounds {
				for i, op := range ops {
					for _, side := range []bool{r%2 == 1, r%2 == 0} { // alternate which side goes first
						d := plain
						if side {
							d = secure
						}
						c0 := processCPU()
						t, err := timed(func() error { return d.do(ctx, op) })
						if err != nil {
							return err
						}
						times[side][i] = append(times[side][i], t)
						if op == opPushPull {
							cpu[side] = append(cpu[side], processCPU()-c0)
						}
					}
				}
				fmt.Fprintf(w, "round %d/%d: push+pull plain %.0f, TLS %.0f MB/s\n", r+1, o.Rounds,
					mbps(opPushPull.bytes(nb), times[false][0][r]), mbps(opPushPull.bytes(nb), times[true][0][r]))
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("bench: wire --tls: %w", err)
	}
	fig := func(side bool) Figures {
		t := times[side]
		return Figures{PushPullMBps: mbps(opPushPull.bytes(nb), median(t[0])), PushMBps: mbps(opPush.bytes(nb), median(t[1])), PullMBps: mbps(opPull.bytes(nb), median(t[2]))}
	}
	rep.Plain, rep.TLS = fig(false), fig(true)
	rep.Ratio = rep.TLS.PushPullMBps / rep.Plain.PushPullMBps
	rep.PlainCPUms, rep.TLSCPUms = median(cpu[false]).Seconds()*1e3, median(cpu[true]).Seconds()*1e3
	if rep.TLSCPUms > 0 {
		rep.CPURatio = rep.PlainCPUms / rep.TLSCPUms
	}
	for r := range o.Rounds {
		rep.Ratios = append(rep.Ratios, times[false][0][r].Seconds()/times[true][0][r].Seconds())
	}
	rep.RoundRatio = medianFloat(rep.Ratios)
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

// AppTLS runs lr through the parameter server with mutual TLS and
// without, alternating, each on a fresh one-server, one-worker cluster.
func AppTLS(ctx context.Context, o AppOptions, progress io.Writer) (*TLSReport, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	w := orDiscard(progress)
	start := time.Now()
	rep := newTLSReport("app", o.Repeats)
	rep.Rounds = o.Repeats
	log := logger(w)
	nets, cleanup, err := tlsNetworks(log)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	cfg := appConfig(o)
	rates := map[bool][]float64{}
	for i := range o.Repeats {
		for _, side := range []bool{i%2 == 1, i%2 == 0} {
			var nw func(string) transport.Network
			name := "plain"
			if side {
				nw, name = nets, "TLS"
			}
			var run *lr.Report
			err := onWorkerNet(ctx, nw, log, func(ctx context.Context, c *ps.Client) error {
				var err error
				run, err = lr.Run(ctx, c, cfg)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("bench: app --tls: %s: %w", name, err)
			}
			var secs float64
			for _, e := range run.Passes {
				secs += e.Seconds
			}
			rate := float64(run.Examples) / secs
			rates[side] = append(rates[side], rate)
			f := &rep.Plain
			if side {
				f = &rep.TLS
			}
			f.TestAUC = run.TestAUC
			fmt.Fprintf(w, "run %d/%d: %-5s %.0f examples/s, test AUC %.4f\n", i+1, o.Repeats, name, rate, run.TestAUC)
		}
	}
	rep.Plain.ExamplesPerSecond, rep.TLS.ExamplesPerSecond = medianFloat(rates[false]), medianFloat(rates[true])
	rep.Ratio = rep.TLS.ExamplesPerSecond / rep.Plain.ExamplesPerSecond
	for i := range rates[true] {
		rep.Ratios = append(rep.Ratios, rates[true][i]/rates[false][i])
	}
	rep.RoundRatio = medianFloat(rep.Ratios)
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

// hasAESNI reads /proc/cpuinfo's flags (false where there is none).
func hasAESNI() bool {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	for l := range strings.Lines(string(b)) {
		if strings.HasPrefix(l, "flags") {
			return strings.Contains(l+" ", " aes ")
		}
	}
	return false
}
