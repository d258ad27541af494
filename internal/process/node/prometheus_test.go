package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPrometheusScrapesCluster runs Debian's Prometheus server against a
// local cluster's nodes and waits until it has scraped every one and
// holds their series. It takes a few seconds, so it runs only with
// TERRACE_PROMETHEUS=1 (.ci/run sets it).
func TestPrometheusScrapesCluster(t *testing.T) {
	if os.Getenv("TERRACE_PROMETHEUS") == "" {
		t.Skip("set TERRACE_PROMETHEUS=1 to scrape a cluster with a real Prometheus server")
	}
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus not found: apt-get install prometheus")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	coord, servers, workers := runCluster(t, ctx)
	targets := append(append([]string{coord}, servers...), workers...)
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: terrace\n    static_configs:\n      - targets: ['%s']\n",
		strings.Join(targets, "', '"))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	web := ln.Addr().String()
	ln.Close()
	cmd := exec.CommandContext(ctx, bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+web)
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("prometheus's log:\n%s", b)
		}
	}()
	queries := map[string]float64{
		`count(up{job="terrace"} == 1)`:          float64(len(targets)),
		`count(terrace_server_pushes_total > 0)`: float64(len(servers)),
		// Every worker's series, and rows trained among them: one worker
		// may train every partition before the other asks for one (once
		// in CI on two busy cores), and its counter is then 0.
		`count(terrace_worker_examples_trained_total)`:          float64(len(workers)),
		`count(sum(terrace_worker_examples_trained_total) > 0)`: 1,
		`count(terrace_coordinator_epoch > 0)`:                  1,
		// Two servers, each a reliable machine of its own (the workers
		// finished), priced.
		`sum(terrace_coordinator_machines{class="reliable"})`: 2,
		`count(terrace_coordinator_cost_dollars_total > 0)`:   1,
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for q, want := range queries {
		for {
			got, err := promQuery(ctx, web, q)
			if err == nil && got == want {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("prometheus never answered %s with %v (last: %v, %v)", q, want, got, err)
			case <-tick.C:
			}
		}
	}
}

// promQuery evaluates an instant query that yields one number.
func promQuery(ctx context.Context, web, q string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+web+"/api/v1/query?query="+url.QueryEscape(q), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, err
	}
	if len(r.Data.Result) != 1 {
		return 0, fmt.Errorf("%d results", len(r.Data.Result))
	}
	var v float64
	s, _ := r.Data.Result[0].Value[1].(string)
	_, err = fmt.Sscan(s, &v)
	return v, err
}
