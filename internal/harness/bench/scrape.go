package bench

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
)

// scrapeCluster serves the /metrics of l's servers and of worker c, as
// their processes would, and fetches every node's (the coordinator's
// too) each every until the returned stop is called: what a Prometheus
// server scraping the cluster costs it.
func scrapeCluster(ctx context.Context, l *node.Local, c *ps.Client, every time.Duration) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	targets := []string{l.CoordAddr}
	collectors := []prometheus.Collector{c.Collector()}
	for _, s := range l.Servers {
		collectors = append(collectors, s.Collector())
	}
	for _, col := range collectors {
		reg, err := node.NewRegistry(col)
		if err != nil {
			cancel()
			return nil, err
		}
		addr, err := node.ServeMetrics(ctx, nil, "127.0.0.1:0", reg)
		if err != nil {
			cancel()
			return nil, err
		}
		targets = append(targets, addr)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for _, a := range targets {
				// A failed scrape is skipped, as Prometheus would.
				scrapeOnce(ctx, a)
			}
		}
	}()
	return func() { cancel(); wg.Wait() }, nil
}

func scrapeOnce(ctx context.Context, addr string) error {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}
