package node_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/terrace-ml/terrace/internal/placement/tier"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// trainCounters trains one pass of partitions of 64 rows, each row
// pushing and pulling a few keys, so that every metric has moved.
func trainCounters(ctx context.Context, c *ps.Client) error {
	tb, err := c.CreateTable(ctx, table.Spec{Name: "w", Width: 4, Consistency: table.Consistency{Model: table.ASP}})
	if err != nil {
		return err
	}
	rows := make([]int, 64)
	for i := range rows {
		rows[i] = i
	}
	return c.EachPartition(ctx, 0, ps.Loop{
		Order: func(pass, part int) []int { return rows },
		Batch: 8,
		Step: func(ctx context.Context, b ps.Batch) (*ps.Future, error) {
			// A slot a row: over the pass, 64 slots, so that every
			// server heads some (and replicates), whatever the ring.
			var keys []uint64
			for r := b.Lo; r < b.Hi; r++ {
				keys = append(keys, uint64(r)*64)
			}
			keys = append(keys, uint64(b.Lo)+100000)
			vals := make([]float32, len(keys)*4)
			for i := range vals {
				vals[i] = 1
			}
			if err := tb.Pull(keys, make([]float32, len(vals))).Wait(ctx); err != nil {
				return nil, err
			}
			return tb.Push(keys, vals), nil
		},
	})
}

// runCluster starts a local cluster of 2 servers and 2 workers, trains
// one pass, and returns the /metrics addresses of every node (the
// workers' registries outlive their clients: their counters stay).
func runCluster(t testing.TB, ctx context.Context) (coord string, servers, workers []string) {
	t.Helper()
	l, err := node.StartLocal(ctx, node.LocalConfig{Servers: 2, Workers: 2, Replication: 2, Prices: tier.ByClass{Reliable: 0.21, Transient: 0.0364}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	serve := func(cs ...prometheus.Collector) string {
		reg, err := node.NewRegistry(cs...)
		if err != nil {
			t.Fatal(err)
		}
		addr, err := node.ServeMetrics(ctx, nil, "127.0.0.1:0", reg)
		if err != nil {
			t.Fatal(err)
		}
		return addr
	}
	for _, s := range l.Servers {
		servers = append(servers, serve(s.Collector()))
	}
	var mu sync.Mutex
	_, err = l.RunWorkers(ctx, func(ctx context.Context, c *ps.Client) (any, error) {
		addr := serve(c.Collector())
		mu.Lock()
		workers = append(workers, addr)
		mu.Unlock()
		return nil, trainCounters(ctx, c)
	})
	if err != nil {
		t.Fatal(err)
	}
	return l.CoordAddr, servers, workers
}

func scrape(t testing.TB, ctx context.Context, addr string) []byte {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %v %s", addr, err, resp.Status)
	}
	return b
}

// TestMetricsOnEveryNode scrapes the coordinator, every server and every
// worker of a cluster that trained, checks that each shows its own
// metrics having moved, and has promtool lint them.
func TestMetricsOnEveryNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	coord, servers, workers := runCluster(t, ctx)
	type node struct {
		role, addr string
		want       []string
	}
	nodes := []node{{"coordinator", coord, []string{"terrace_coordinator_events_total{kind=\"join\"} 4", "terrace_coordinator_examples_trained_total", "terrace_coordinator_request_duration_seconds_bucket",
		"terrace_coordinator_stage 1", "terrace_coordinator_machines{class=\"transient\"} 0", "terrace_coordinator_cost_dollars_total",
		"terrace_coordinator_cost_dollars_per_hour", "terrace_coordinator_worker_clock_spread"}}}
	for _, a := range servers {
		nodes = append(nodes, node{"server", a, []string{"terrace_server_pushes_total", "terrace_server_request_duration_seconds_bucket{op=\"push\"", "terrace_server_received_bytes_total", "terrace_server_replication_lag_entries"}})
	}
	for _, a := range workers {
		nodes = append(nodes, node{"worker", a, []string{"terrace_worker_examples_trained_total", "terrace_worker_request_duration_seconds_bucket{op=\"pull\"", "terrace_worker_keys_pushed_total"}})
	}
	promtool, _ := exec.LookPath("promtool")
	if promtool == "" {
		t.Log("promtool not found (Debian package prometheus): metrics not linted; .ci/run installs it")
	}
	for _, n := range nodes {
		body := scrape(t, ctx, n.addr)
		for _, w := range n.want {
			if !bytes.Contains(body, []byte(w)) {
				t.Errorf("%s %s: no %s in its metrics", n.role, n.addr, w)
			}
		}
		if moved := movedCounter(body, "terrace_"+n.role+"_"); !moved {
			t.Errorf("%s %s: every terrace counter is zero", n.role, n.addr)
		}
		if promtool == "" {
			continue
		}
		cmd := exec.CommandContext(ctx, promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics on the %s's /metrics: %v\n%s", n.role, err, out)
		}
	}
}

// movedCounter reports whether some counter named with prefix is above 0.
func movedCounter(body []byte, prefix string) bool {
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, prefix) && strings.Contains(line, "_total") {
			var v float64
			f := strings.Fields(line)
			if _, err := fmt.Sscan(f[len(f)-1], &v); err == nil && v > 0 {
				return true
			}
		}
	}
	return false
}

// BenchmarkScrape measures one scrape of each node of a cluster that
// trained, over loopback HTTP as Prometheus would: the cost of /metrics
// per scrape (docs/design/observe.md).
func BenchmarkScrape(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	coord, servers, workers := runCluster(b, ctx)
	for _, n := range []struct{ role, addr string }{{"coordinator", coord}, {"server", servers[0]}, {"worker", workers[0]}} {
		b.Run(n.role, func(b *testing.B) {
			var size int
			for b.Loop() {
				size = len(scrape(b, ctx, n.addr))
			}
			b.ReportMetric(float64(size), "bytes/scrape")
		})
	}
}
