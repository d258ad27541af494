package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/dataplane/transport"
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

// ServeMetrics serves g as /metrics on addr of network (TCP if nil) until
// ctx ends, and returns the address it listens on (addr may have port 0).
// Under TLS (tlsnet) the endpoint is mutual TLS like every other listener
// of the node: a scraper presents a certificate of the cluster's CA.
func ServeMetrics(ctx context.Context, network transport.Network, addr string, g prometheus.Gatherer) (string, error) {
	ln, err := transport.OrTCP(network).Listen(addr)
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
	// Extra are registered beside the node's own collectors (a worker's
	// peer endpoint).
	Extra []prometheus.Collector
}

// MetricsURL is the URL of /metrics at addr: https when the node's
// network is TLS.
func MetricsURL(network transport.Network, addr string) string {
	if _, ok := network.(interface{ ClientTLS() *tls.Config }); ok {
		return "https://" + addr + "/metrics"
	}
	return "http://" + addr + "/metrics"
}

// serve starts serving the node's registry, which the node fills once
// its parts exist, and tells cc to announce the address; nil if the node
// serves no metrics.
func (m NodeMetrics) serve(ctx context.Context, network transport.Network, cc *api.Client) (*prometheus.Registry, error) {
	if m.Listen == "" {
		return nil, nil
	}
	reg, err := NewRegistry()
	if err != nil {
		return nil, err
	}
	for _, c := range m.Extra {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	addr, err := ServeMetrics(ctx, network, m.Listen, reg)
	if err != nil {
		return nil, err
	}
	cc.Metrics = addr
	if m.Ready != nil {
		m.Ready(addr)
	}
	return reg, nil
}
