package ps

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/terrace-ml/terrace/internal/dataplane/wire"
)

// A worker's metrics (docs/design/observe.md): counters the client keeps
// as it starts operations and as its partition loops train, read at
// scrape time, and one histogram of operation latency. The hot path pays
// a few atomic adds and one histogram observation per operation, never
// per key.

type clientObs struct {
	pushes, pulls, keysPushed, keysPulled atomic.Int64
	bytesOut, bytesIn                     atomic.Int64
	examples, leases                      atomic.Int64
	latency                               *prometheus.HistogramVec
	push, pull, pushPull                  prometheus.Observer
}

func newClientObs() *clientObs {
	o := &clientObs{latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "terrace_worker_request_duration_seconds",
		Help: "Time from starting a push or pull to its future's completion (replication and staleness waits included), by operation.",
		// From a cached pull on loopback to a BSP wait for a straggler.
		Buckets: prometheus.ExponentialBuckets(2e-5, 4, 11),
	}, []string{"op"})}
	o.push, o.pull, o.pushPull = o.latency.WithLabelValues("push"), o.latency.WithLabelValues("pull"), o.latency.WithLabelValues("pushpull")
	return o
}

// started counts o, and times it until its future completes.
func (m *clientObs) started(o *op, width int) {
	n := int64(o.n())
	var obs prometheus.Observer
	switch o.typ {
	case wire.TPush:
		m.pushes.Add(1)
		m.keysPushed.Add(n)
		m.bytesOut.Add(n * int64(width) * 4)
		obs = m.push
	case wire.TPull:
		m.pulls.Add(1)
		m.keysPulled.Add(n)
		m.bytesIn.Add(n * int64(width) * 4)
		obs = m.pull
	case wire.TPushPull:
		m.pushes.Add(1)
		m.pulls.Add(1)
		m.keysPushed.Add(n)
		m.keysPulled.Add(n)
		m.bytesOut.Add(n * int64(width) * 4)
		m.bytesIn.Add(n * int64(width) * 4)
		obs = m.pushPull
	default:
		return
	}
	start := time.Now()
	o.f.then(func(error) { obs.Observe(time.Since(start).Seconds()) })
}

func workerCounter(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, nil, nil)
}

var (
	descWPushes   = workerCounter("terrace_worker_pushes_total", "Push operations started (push-pulls included).")
	descWPulls    = workerCounter("terrace_worker_pulls_total", "Pull operations started (push-pulls included).")
	descWKeysOut  = workerCounter("terrace_worker_keys_pushed_total", "Keys pushed.")
	descWKeysIn   = workerCounter("terrace_worker_keys_pulled_total", "Keys pulled.")
	descWBytesOut = workerCounter("terrace_worker_pushed_bytes_total", "Bytes of values pushed (before encodings and headers).")
	descWBytesIn  = workerCounter("terrace_worker_pulled_bytes_total", "Bytes of values pulled.")
	descWExamples = workerCounter("terrace_worker_examples_trained_total", "Rows trained by the partition loops (a row trained again after a takeover counts again).")
	descWLeases   = prometheus.NewDesc("terrace_worker_leases_held", "Leases of partition pieces being trained.", nil, nil)
	descWClock    = prometheus.NewDesc("terrace_worker_clock", "The worker's clock.", nil, nil)
	descWRefused  = workerCounter("terrace_worker_non_finite_refused_total", "Pushed values the servers refused as not finite.")
	descWReassign = workerCounter("terrace_worker_reassignments_total", "Tails of slow peers' pieces this worker took (rapid reassignment).")
	descWReassEx  = workerCounter("terrace_worker_examples_reassigned_total", "Rows in the tails this worker took.")
	descWSplitRef = workerCounter("terrace_worker_splits_refused_total", "Splits this worker asked for that the coordinator refused.")
)

// Collector returns the worker's metrics for a Prometheus registry.
func (c *Client) Collector() prometheus.Collector { return (*clientCollector)(c) }

type clientCollector Client

func (cc *clientCollector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(cc, ch) }

func (cc *clientCollector) Collect(ch chan<- prometheus.Metric) {
	c := (*Client)(cc)
	m := c.obs
	if m == nil {
		return
	}
	m.latency.Collect(ch)
	cnt := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	cnt(descWPushes, m.pushes.Load())
	cnt(descWPulls, m.pulls.Load())
	cnt(descWKeysOut, m.keysPushed.Load())
	cnt(descWKeysIn, m.keysPulled.Load())
	cnt(descWBytesOut, m.bytesOut.Load())
	cnt(descWBytesIn, m.bytesIn.Load())
	cnt(descWExamples, m.examples.Load())
	var refused int64
	c.mu.RLock()
	for _, t := range c.tables {
		refused += t.Refused()
	}
	c.mu.RUnlock()
	cnt(descWRefused, refused)
	rs := c.ReassignStats()
	cnt(descWReassign, rs.Reassignments)
	cnt(descWReassEx, rs.ExamplesReassigned)
	cnt(descWSplitRef, rs.Refused)
	ch <- prometheus.MustNewConstMetric(descWLeases, prometheus.GaugeValue, float64(m.leases.Load()))
	ch <- prometheus.MustNewConstMetric(descWClock, prometheus.GaugeValue, float64(c.clock.Load()))
}
