package coord

import (
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// coordMetrics are the coordinator's own instruments; the rest of its
// metrics are read from its state at scrape time (Collector).
type coordMetrics struct {
	events   *prometheus.CounterVec
	requests *prometheus.HistogramVec
}

func newCoordMetrics() *coordMetrics {
	return &coordMetrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "terrace_coordinator_events_total",
			Help: "Events on the coordinator's timeline, by kind (join, drain, failed, left, ring, grant, split, checkpoint, ...).",
		}, []string{"kind"}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "terrace_coordinator_request_duration_seconds",
			Help:    "Time to answer a control-plane request, by route (long-polls included).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 25},
		}, []string{"route"}),
	}
}

func (cm *coordMetrics) event(kind string) { cm.events.WithLabelValues(kind).Inc() }

// instrument times every request by the route pattern that serves it.
func (cm *coordMetrics) instrument(mux *http.ServeMux, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, route := mux.Handler(r)
		if route == "" {
			route = "unmatched"
		}
		start := time.Now()
		next.ServeHTTP(w, r)
		cm.requests.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}

var (
	descNodes = prometheus.NewDesc("terrace_coordinator_nodes",
		"Nodes the coordinator knows, by role and state (serving, joining, leaving, training, idle, finished, dead, left).",
		[]string{"role", "state"}, nil)
	descEpoch   = prometheus.NewDesc("terrace_coordinator_epoch", "The epoch of the published layout.", nil, nil)
	descLeases  = prometheus.NewDesc("terrace_coordinator_leases_held", "Pieces of data partitions leased to live workers.", nil, nil)
	descTrained = prometheus.NewDesc("terrace_coordinator_examples_trained_total",
		"Rows recorded as trained (by progress reports), every job's, since this coordinator took over (a counter: it does not fall at a new job; status gives the current job's).", nil, nil)
	descPass = prometheus.NewDesc("terrace_coordinator_pass", "The first training pass not yet complete.", nil, nil)
	descDone = prometheus.NewDesc("terrace_coordinator_pass_partitions_done",
		"Partitions of the pass in progress trained to their end.", nil, nil)
	descCkpt  = prometheus.NewDesc("terrace_coordinator_checkpoints_total", "Cluster checkpoints committed.", nil, nil)
	descStage = prometheus.NewDesc("terrace_coordinator_stage", "The tiers' stage the cluster runs (1 without tiers).", nil, nil)
	descMachs = prometheus.NewDesc("terrace_coordinator_machines",
		"Machines with a live node, by class (reliable, transient).", []string{"class"}, nil)
	descSpread = prometheus.NewDesc("terrace_coordinator_worker_clock_spread",
		"The training workers' clock spread: the fastest's last reported clock less the slowest's.", nil, nil)
	descCost = prometheus.NewDesc("terrace_coordinator_cost_dollars_total",
		"What the live machines have cost since this coordinator took over, at its --price (only when set).", nil, nil)
	descCostRate = prometheus.NewDesc("terrace_coordinator_cost_dollars_per_hour",
		"What the live machines cost an hour at the coordinator's --price (only when set).", nil, nil)
	descLost = prometheus.NewDesc("terrace_coordinator_updates_lost_total",
		"Acknowledged updates lost at fallbacks after revocations without notice, as the BackupPS's loss ledgers counted them.", nil, nil)
	descCopiesLost = prometheus.NewDesc("terrace_coordinator_copies_lost_total",
		"Times every copy of some slots was gone before a new copy was complete (k servers holding them failed together): their acknowledged updates are lost (the lost event says which).", nil, nil)
	descRewinds = prometheus.NewDesc("terrace_coordinator_rewinds_total",
		"Times the cluster went back to its newest checkpoint after slots lost every copy (coordinator --on-copies-lost resume).", nil, nil)
	descRepeated = prometheus.NewDesc("terrace_coordinator_examples_repeated_total",
		"Example trainings beyond one per row and pass, in the passes accounted so far (a dead worker's rows after its last progress record, trained again).", nil, nil)
	descSkipped = prometheus.NewDesc("terrace_coordinator_examples_skipped_total",
		"Rows short of one acknowledged training per pass, in the passes accounted so far (acknowledged updates lost, or rows nobody trained).", nil, nil)
	descAccounted = prometheus.NewDesc("terrace_coordinator_passes_accounted",
		"Passes whose examples account (repeated, skipped) is in.", nil, nil)
	descAtRisk = prometheus.NewDesc("terrace_coordinator_updates_at_risk_total",
		"Updates the ActivePS were allowed to acknowledge in the rounds at risk at fallbacks (the bound on updates lost).", nil, nil)
)

// Collector returns the coordinator's metrics for a Prometheus registry:
// its counters, and gauges read from its state at each scrape.
func (c *Coordinator) Collector() prometheus.Collector { return (*coordCollector)(c) }

type coordCollector Coordinator

func (cc *coordCollector) Describe(ch chan<- *prometheus.Desc) {
	cc.metrics.events.Describe(ch)
	cc.metrics.requests.Describe(ch)
	for _, d := range []*prometheus.Desc{descNodes, descEpoch, descLeases, descTrained, descPass, descDone, descCkpt,
		descStage, descMachs, descSpread, descCost, descCostRate, descLost, descAtRisk, descCopiesLost, descRewinds, descRepeated, descSkipped, descAccounted} {
		ch <- d
	}
}

func (cc *coordCollector) Collect(ch chan<- prometheus.Metric) {
	c := (*Coordinator)(cc)
	c.metrics.events.Collect(ch)
	c.metrics.requests.Collect(ch)
	st := c.Status()
	c.mu.Lock()
	ckpts, trained := len(c.m.ckptDone), c.m.trained
	c.mu.Unlock()
	type rs struct{ role, state string }
	nodes := map[rs]int{}
	leases := 0
	for _, n := range st.Nodes {
		nodes[rs{n.Role, n.State}]++
		if n.Role == api.RoleWorker && n.Holds != "" {
			leases += len(strings.Fields(n.Holds))
		}
	}
	for k, n := range nodes {
		ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(n), k.role, k.state)
	}
	ch <- prometheus.MustNewConstMetric(descEpoch, prometheus.GaugeValue, float64(st.Epoch))
	ch <- prometheus.MustNewConstMetric(descLeases, prometheus.GaugeValue, float64(leases))
	ch <- prometheus.MustNewConstMetric(descTrained, prometheus.CounterValue, float64(trained))
	ch <- prometheus.MustNewConstMetric(descPass, prometheus.GaugeValue, float64(st.Job.Pass))
	ch <- prometheus.MustNewConstMetric(descDone, prometheus.GaugeValue, float64(st.Job.Done))
	ch <- prometheus.MustNewConstMetric(descCkpt, prometheus.CounterValue, float64(ckpts))
	ch <- prometheus.MustNewConstMetric(descStage, prometheus.GaugeValue, float64(st.Stage))
	ch <- prometheus.MustNewConstMetric(descMachs, prometheus.GaugeValue, float64(st.Machines.Reliable), "reliable")
	ch <- prometheus.MustNewConstMetric(descMachs, prometheus.GaugeValue, float64(st.Machines.Transient), "transient")
	ch <- prometheus.MustNewConstMetric(descSpread, prometheus.GaugeValue, float64(st.Job.Staleness))
	ch <- prometheus.MustNewConstMetric(descLost, prometheus.CounterValue, float64(st.UpdatesLost))
	ch <- prometheus.MustNewConstMetric(descAtRisk, prometheus.CounterValue, float64(st.UpdatesAtRisk))
	ch <- prometheus.MustNewConstMetric(descCopiesLost, prometheus.CounterValue, float64(st.CopiesLost))
	ch <- prometheus.MustNewConstMetric(descRewinds, prometheus.CounterValue, float64(st.Rewinds))
	ch <- prometheus.MustNewConstMetric(descRepeated, prometheus.CounterValue, float64(st.Job.Repeated))
	ch <- prometheus.MustNewConstMetric(descSkipped, prometheus.CounterValue, float64(st.Job.Skipped))
	ch <- prometheus.MustNewConstMetric(descAccounted, prometheus.GaugeValue, float64(st.Job.Accounted))
	if st.Dollars != nil && st.DollarsPerHour != nil {
		ch <- prometheus.MustNewConstMetric(descCost, prometheus.CounterValue, *st.Dollars)
		ch <- prometheus.MustNewConstMetric(descCostRate, prometheus.GaugeValue, *st.DollarsPerHour)
	}
}
