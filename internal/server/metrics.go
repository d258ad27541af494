package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/dataplane/wire"
)

// A server's metrics (docs/design/observe.md): what it counts anyway
// (Stats, Handoff) is read at scrape time; the hot path adds one
// histogram observation per frame, one atomic add per reply, and a
// counter per refusal.

// obs are the instruments the hot path feeds.
type obs struct {
	requests *prometheus.HistogramVec
	byOp     [wire.TPing + 1]prometheus.Observer
	refused  *prometheus.CounterVec
}

func newObs() *obs {
	o := &obs{
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "terrace_server_request_duration_seconds",
			Help: "Time from a frame's arrival to its handling, by frame type (a pull parked by BSP/SSP is counted until parked, not until answered).",
			// Frames are handled in microseconds to milliseconds.
			Buckets: prometheus.ExponentialBuckets(5e-6, 4, 10),
		}, []string{"op"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "terrace_server_refused_frames_total",
			Help: "Frames refused with an error reply, by reason.",
		}, []string{"reason"}),
	}
	for t := range o.byOp {
		if name := opName(wire.Type(t)); name != "" {
			o.byOp[t] = o.requests.WithLabelValues(name)
		}
	}
	return o
}

func opName(t wire.Type) string {
	switch t {
	case wire.TPush:
		return "push"
	case wire.TPull:
		return "pull"
	case wire.TPushPull:
		return "pushpull"
	case wire.TClock:
		return "clock"
	case wire.TReplicate:
		return "replicate"
	case wire.TPing:
		return "ping"
	}
	return ""
}

// handled records how long frame type t took since start.
func (o *obs) handled(t wire.Type, start time.Time) {
	if int(t) < len(o.byOp) && o.byOp[t] != nil {
		o.byOp[t].Observe(time.Since(start).Seconds())
	}
}

func (o *obs) refusedFor(c wire.Code) { o.refused.WithLabelValues(reasonOf(c)).Inc() }

func reasonOf(c wire.Code) string {
	switch c {
	case wire.CodeStaleEpoch:
		return "stale_epoch"
	case wire.CodeNotOwner:
		return "not_owner"
	case wire.CodeUnknownTable:
		return "unknown_table"
	case wire.CodeBadRequest:
		return "bad_request"
	case wire.CodeUnknownKeySet:
		return "unknown_key_set"
	case wire.CodeShuttingDown:
		return "shutting_down"
	case wire.CodeNotConfigured:
		return "not_configured"
	case wire.CodeTooManyRefused:
		return "too_many_refused"
	}
	return "other"
}

// send queues o on c, counting its bytes.
func (s *Server) send(c *conn, o transport.Outgoing) {
	s.stats.bytesOut.Add(int64(o.Frame.Size()))
	c.Send(o)
}

func counter(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }

var (
	descPushes     = counter("terrace_server_pushes_total", "Push frames applied (push-pulls included).")
	descPulls      = counter("terrace_server_pulls_total", "Pull frames answered (push-pulls included).")
	descClocks     = counter("terrace_server_clocks_total", "Clock frames received.")
	descKeysIn     = counter("terrace_server_keys_pushed_total", "Keys received in pushes.")
	descKeysOut    = counter("terrace_server_keys_pulled_total", "Keys answered in pulls.")
	descBytesIn    = counter("terrace_server_received_bytes_total", "Bytes of frames received, headers included.")
	descBytesOut   = counter("terrace_server_sent_bytes_total", "Bytes of reply frames queued to clients and peers, headers included.")
	descNonFinite  = counter("terrace_server_non_finite_updates_total", "Pushed values refused as not finite (NaN or Inf).")
	descErrors     = counter("terrace_server_errors_total", "Error replies and broken connections.")
	descDups       = counter("terrace_server_duplicate_pushes_total", "Pushes recognised as already applied (retries through a failover) and not applied again.")
	descReplBytes  = counter("terrace_server_replication_received_bytes_total", "Bytes of replication frames received from chain heads.")
	descHandoffK   = counter("terrace_server_handoff_keys_total", "Keys shipped in full slot copies (joins, drains, failovers).")
	descHandoffB   = counter("terrace_server_handoff_bytes_total", "Bytes shipped in full slot copies.")
	descHandoffS   = counter("terrace_server_handoff_seconds_total", "Time spent building and shipping full slot copies.")
	descParked     = counter("terrace_server_staleness_waits_total", "Pulls parked until the slowest worker's clock came within the table's staleness bound.")
	descMinClock   = prometheus.NewDesc("terrace_server_min_clock", "The slowest live worker's clock, the minimum that reads see.", nil, nil)
	descKeys       = prometheus.NewDesc("terrace_server_stored_keys", "Keys held, replicas included.", nil, nil)
	descStoreBytes = prometheus.NewDesc("terrace_server_stored_bytes", "Bytes of the tables' stores.", nil, nil)
	descEpoch      = prometheus.NewDesc("terrace_server_epoch", "The epoch of the range map the server serves.", nil, nil)
	descLag        = prometheus.NewDesc("terrace_server_replication_lag_entries",
		"Pushes queued for a chain peer and not yet confirmed durable on it.", []string{"peer"}, nil)
)

// Collector returns the server's metrics for a Prometheus registry.
func (s *Server) Collector() prometheus.Collector { return (*serverCollector)(s) }

type serverCollector Server

func (sc *serverCollector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(sc, ch) }

func (sc *serverCollector) Collect(ch chan<- prometheus.Metric) {
	s := (*Server)(sc)
	s.obs.requests.Collect(ch)
	s.obs.refused.Collect(ch)
	st, h := s.Stats(), s.Handoff()
	c := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	c(descPushes, float64(st.Pushes))
	c(descPulls, float64(st.Pulls))
	c(descClocks, float64(st.Clocks))
	c(descKeysIn, float64(st.KeysPushed))
	c(descKeysOut, float64(st.KeysPulled))
	c(descBytesIn, float64(st.BytesIn))
	c(descBytesOut, float64(s.stats.bytesOut.Load()))
	c(descNonFinite, float64(st.Refused))
	c(descErrors, float64(st.Errors))
	c(descDups, float64(s.stats.duplicates.Load()))
	c(descReplBytes, float64(s.stats.replicated.Load()))
	c(descParked, float64(s.stats.parked.Load()))
	c(descHandoffK, float64(h.Keys))
	c(descHandoffB, float64(h.Bytes))
	c(descHandoffS, h.Seconds)
	g(descMinClock, float64(st.MinClock))
	g(descKeys, float64(st.Keys))
	g(descStoreBytes, float64(st.StoreBytes))
	g(descEpoch, float64(s.Epoch()))
	s.replMu.Lock()
	repl := make([]*replicator, 0, len(s.repl))
	for _, r := range s.repl {
		repl = append(repl, r)
	}
	s.replMu.Unlock()
	for _, r := range repl {
		r.mu.Lock()
		durable, queued := r.q.durable()
		r.mu.Unlock()
		ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(queued-durable), r.peer.ID)
	}
}
