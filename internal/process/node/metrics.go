package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// NewRegistry returns a Prometheus registry holding cs and the Go
// runtime's and the process's collectors: what one node exposes.
func NewRegistry(cs ...prometheus.Collector) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	cs = append(cs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	return reg, nil
}

// ServeMetrics serves g as /metrics on addr until ctx ends, and returns
// the address it listens on (addr may have port 0).
func ServeMetrics(ctx context.Context, addr string, g prometheus.Gatherer) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("metrics: listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			ln.Close()
		}
	}()
	context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		hs.Shutdown(sctx)
	})
	return ln.Addr().String(), nil
}

// NodeMetrics says where a server or a worker serves /metrics.
type NodeMetrics struct {
	// Listen is the address to serve on ("" for nowhere; port 0 picks
	// one). The node announces it to the coordinator when it joins.
	Listen string
	// Ready, when set, is told the address once it listens.
	Ready func(addr string)
}

// serve starts serving the node's registry, which the node fills once
// its parts exist, and tells cc to announce the address; nil if the node
// serves no metrics.
func (m NodeMetrics) serve(ctx context.Context, cc *api.Client) (*prometheus.Registry, error) {
	if m.Listen == "" {
		return nil, nil
	}
	reg, err := NewRegistry()
	if err != nil {
		return nil, err
	}
	addr, err := ServeMetrics(ctx, m.Listen, reg)
	if err != nil {
		return nil, err
	}
	cc.Metrics = addr
	if m.Ready != nil {
		m.Ready(addr)
	}
	return reg, nil
}
