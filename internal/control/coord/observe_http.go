package coord

import (
	"context"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/control/dash"
)

// observeHandlers serves what shows the cluster to people: the event
// timeline, the status, the Prometheus metrics and the dashboard. All
// only read.
func (c *Coordinator) observeHandlers(mux *http.ServeMux) {
	mux.HandleFunc(api.RouteEvents, func(w http.ResponseWriter, r *http.Request) {
		after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
		follow := r.URL.Query().Get("follow") != ""
		ctx, cancel := context.WithTimeout(r.Context(), api.PollWait)
		defer cancel()
		reply(w, c.Events(ctx, after, follow), nil)
	})
	mux.HandleFunc(api.RouteStatus, func(w http.ResponseWriter, r *http.Request) { reply(w, c.Status(), nil) })
	mux.HandleFunc(api.RouteHistory, func(w http.ResponseWriter, r *http.Request) { reply(w, c.History(), nil) })
	handle(mux, api.RouteNotice, func(ctx context.Context, n api.Notice) (any, error) {
		_, err := c.call(ctx, func(m *Machine, id uint64) { m.Notice(id, n) })
		return struct{}{}, err
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c.Collector(), collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux.Handle(api.RouteMetrics, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("GET /{$}", dash.Handler())
	mux.Handle("GET /dash/", dash.Handler())
}
