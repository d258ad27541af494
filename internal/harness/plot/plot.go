package plot

import (
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"time"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// ErrNoData is returned for a report with nothing to draw.
var ErrNoData = errors.New("plot: the report has no passes and no events")

// ErrTimelineAsReport is returned for an event timeline (a coordinator's
// --events file) given as the report: it said "json: cannot unmarshal
// array into Go value of type map[string]json.RawMessage".
var ErrTimelineAsReport = errors.New("plot: an event timeline, not a report: give the coordinator's --report, and this file with --events")

// ErrBadEvents wraps a timeline given beside the report that cannot be
// read, so that the caller names its file, not the report's.
var ErrBadEvents = errors.New("plot: events")

// Pass is one training pass as a worker reported it: when it ended, in
// seconds after training started, and its metrics by name ("pass" is its
// number).
type Pass struct {
	Seconds float64
	Metrics map[string]float64
}

// Run is what a plot shows.
type Run struct {
	Passes []Pass
	Events []api.Event
	// Faults are the drill's injections, in seconds after training
	// started; Stall the longest time without an acknowledged push.
	Faults                []Fault
	StallAt, StallSeconds float64
	// History is the coordinator's samples of the cluster: machines by
	// class, stage and dollars over time (reports from this version on).
	History []api.Sample
}

// Fault is one injected fault.
type Fault struct {
	Seconds    float64
	Role, Node string
	Action     string
}

// The metrics a plot looks for, most telling first.
var (
	testMetrics  = []string{"test_auc", "test_rmse", "test_perplexity", "test_accuracy", "test_logloss"}
	trainMetrics = []string{"train_logloss", "train_rmse", "train_loglik_per_token"}
)

// Parse reads a report: `terrace train`'s (workers, events, the drill's
// faults and stall), or the coordinator's --report (workers' reports by
// rank). events, if not nil, is a timeline written by the coordinator's
// --events, used when the report has none.
func Parse(report, events []byte) (*Run, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(report, &top); err != nil {
		var timeline []api.Event
		if json.Unmarshal(report, &timeline) == nil {
			return nil, ErrTimelineAsReport
		}
		return nil, fmt.Errorf("plot: report: %w", err)
	}
	workers := map[string]json.RawMessage{}
	if w, ok := top["workers"]; ok {
		if err := json.Unmarshal(w, &workers); err != nil {
			return nil, fmt.Errorf("plot: report's workers: %w", err)
		}
	} else {
		for k, v := range top { // the coordinator's: reports by rank
			if _, err := strconv.Atoi(k); err == nil {
				workers[k] = v
			}
		}
	}
	r := &Run{}
	// The job's evaluations, whichever worker made each (passes counted
	// from 1): the coordinator's report nests each pass's metrics
	// (api.PassResult), terrace train's has them flat.
	if raw, ok := top["passes"]; ok {
		var results []api.PassResult
		var flat []map[string]any
		if json.Unmarshal(raw, &results) == nil && json.Unmarshal(raw, &flat) == nil {
			for i, p := range results {
				if p.Restored {
					continue // trained and evaluated before the checkpoint resumed from
				}
				m := maps.Clone(p.Metrics)
				if m == nil {
					m = map[string]float64{}
					for k, v := range flat[i] {
						if f, ok := v.(float64); ok {
							m[k] = f
						}
					}
				}
				m["pass"] = float64(p.Pass)
				r.Passes = append(r.Passes, Pass{Seconds: p.Seconds, Metrics: m})
			}
		}
	}
	// Or the passes of the worker that evaluated (rank 0 in every app
	// that evaluates on one worker).
	for _, rank := range sortedKeys(workers) {
		if len(r.Passes) > 0 {
			break
		}
		var w struct {
			Passes []map[string]float64 `json:"passes"`
		}
		if json.Unmarshal(workers[rank], &w) != nil || len(w.Passes) == 0 {
			continue
		}
		for _, p := range w.Passes {
			r.Passes = append(r.Passes, Pass{Seconds: p["seconds"], Metrics: p})
		}
		break
	}
	if raw, ok := top["events"]; ok {
		if err := json.Unmarshal(raw, &r.Events); err != nil {
			return nil, fmt.Errorf("plot: report's events: %w", err)
		}
	}
	if raw, ok := top["history"]; ok {
		if err := json.Unmarshal(raw, &r.History); err != nil {
			return nil, fmt.Errorf("plot: report's history: %w", err)
		}
	}
	if len(r.Events) == 0 && events != nil {
		if err := json.Unmarshal(events, &r.Events); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadEvents, err)
		}
	}
	var drill struct {
		Faults []struct {
			TimeS      float64 `json:"time_s"`
			Role, Node string
			Action     string
		} `json:"faults"`
		StallS  *float64 `json:"max_stall_seconds"`
		StallAt *float64 `json:"max_stall_at_seconds"`
	}
	if json.Unmarshal(report, &drill) == nil {
		for _, f := range drill.Faults {
			r.Faults = append(r.Faults, Fault{Seconds: f.TimeS, Role: f.Role, Node: f.Node, Action: f.Action})
		}
		if drill.StallS != nil && drill.StallAt != nil {
			r.StallSeconds, r.StallAt = *drill.StallS, *drill.StallAt
		}
	}
	if len(r.Passes) == 0 && len(r.Events) == 0 && len(r.History) == 0 {
		return nil, ErrNoData
	}
	r.placePasses()
	return r, nil
}

// placePasses puts each pass at the time it ended: when the timeline says
// the pass was trained, or else at the sum of the passes' durations
// (workers report each pass's own seconds).
func (r *Run) placePasses() {
	t0 := r.start()
	ended := map[int]float64{}
	for _, e := range r.Events {
		var n int
		if e.Kind == api.EventPass {
			if _, err := fmt.Sscanf(e.Cause, "pass %d trained", &n); err == nil {
				ended[n] = e.Time.Sub(t0).Seconds() // passes numbered from 1, as the apps do
			}
		}
	}
	var sum float64
	for i := range r.Passes {
		sum += r.Passes[i].Seconds
		if at, ok := ended[int(r.Passes[i].Metrics["pass"])]; ok {
			r.Passes[i].Seconds = at
		} else {
			r.Passes[i].Seconds = sum
		}
	}
}

func sortedKeys(m map[string]json.RawMessage) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		a, _ := strconv.Atoi(ks[i])
		b, _ := strconv.Atoi(ks[j])
		return a < b
	})
	return ks
}

// start is when training started on the events' clock: the first lease
// grant (workers time their passes from their first lease, about then).
func (r *Run) start() time.Time {
	for _, e := range r.Events {
		if e.Kind == api.EventGrant {
			return e.Time
		}
	}
	if len(r.Events) > 0 {
		return r.Events[0].Time
	}
	return time.Time{}
}

// eventRows are the event kinds the lower panel shows, one row each, top
// down; grants and passes are left out (there are too many to read).
// Losses are shown: every copy of some slots gone (lost), and the updates
// a tiered fallback lost (loss).
var eventRows = []string{api.EventJoin, api.EventJoining, api.EventRing, api.EventNotice, api.EventDrain, api.EventLeft,
	api.EventFailed, api.EventLost, api.EventLoss, api.EventStage, api.EventSplit, api.EventCheckpoint, api.EventLeader}

// Draw writes the plot to w as format "svg" or "png".
func (r *Run) Draw(w io.Writer, format string) error {
	metricsPlot, err := r.metricsPlot()
	if err != nil {
		return err
	}
	eventsPlot, err := r.eventsPlot()
	if err != nil {
		return err
	}
	plots := [][]*gplot.Plot{{metricsPlot}, {eventsPlot}}
	cluster, err := r.clusterPlots()
	if err != nil {
		return err
	}
	for _, p := range cluster {
		plots = append(plots, []*gplot.Plot{p})
	}
	// One time axis for all.
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, row := range plots {
		lo, hi = min(lo, row[0].X.Min), max(hi, row[0].X.Max)
	}
	for _, row := range plots {
		row[0].X.Min, row[0].X.Max = lo, hi
	}
	width, height := 9*vg.Inch, 7*vg.Inch+vg.Length(len(cluster))*2*vg.Inch
	var cw vg.CanvasWriterTo
	switch format {
	case "svg":
		cw = vgsvg.New(width, height)
	case "png":
		cw = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(96))}
	default:
		return fmt.Errorf("plot: format %q: want svg or png", format)
	}
	dc := draw.New(cw)
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadY: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := gplot.Align(plots, tiles, dc)
	for i, row := range plots {
		row[0].Draw(canvases[i][0])
	}
	_, err = cw.WriteTo(w)
	return err
}

func pick(p Pass, names []string) (string, bool) {
	for _, n := range names {
		if v, ok := p.Metrics[n]; ok && v != 0 {
			return n, true
		}
	}
	return "", false
}

// metricsPlot draws the test metric and the training loss by pass.
func (r *Run) metricsPlot() (*gplot.Plot, error) {
	p := gplot.New()
	p.Title.Text = "Training"
	p.X.Label.Text = "seconds after training started"
	p.Legend.Left = false
	p.Legend.Top = false
	p.Legend.YOffs = vg.Centimeter
	var test, train string
	if len(r.Passes) > 0 {
		test, _ = pick(r.Passes[len(r.Passes)-1], testMetrics)
		train, _ = pick(r.Passes[len(r.Passes)-1], trainMetrics)
	}
	p.Y.Label.Text = test
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, name := range []string{test, train} {
		if name == "" {
			continue
		}
		pts := make(plotter.XYs, 0, len(r.Passes))
		for _, ps := range r.Passes {
			v, ok := ps.Metrics[name]
			if !ok {
				continue // not measured at that pass (lr's train_logloss where its evaluator trained none)
			}
			pts = append(pts, plotter.XY{X: ps.Seconds, Y: v})
			lo, hi = min(lo, v), max(hi, v)
		}
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, fmt.Errorf("plot: %s: %w", name, err)
		}
		l.Color = palette[i]
		s.Color = palette[i]
		l.Width = vg.Points(1.5)
		p.Add(l, s)
		p.Legend.Add(name, l, s)
	}
	if test != "" && train != "" {
		p.Y.Label.Text = test + ", " + train
	}
	// The drill's faults and its longest stall, on the same axis.
	if lo > hi {
		lo, hi = 0, 1
	}
	red, orange := color.RGBA{R: 198, G: 40, B: 40, A: 255}, color.RGBA{R: 239, G: 108, B: 0, A: 255}
	named := map[string]bool{}
	for _, f := range r.Faults {
		vline(p, f.Seconds, lo, hi, red, "fault injected, failure detected", named)
	}
	// Failures the coordinator detected, on the same axis.
	t0 := r.start()
	for _, e := range r.Events {
		if e.Kind == api.EventFailed {
			vline(p, e.Time.Sub(t0).Seconds(), lo, hi, red, "fault injected, failure detected", named)
		}
	}
	if r.StallSeconds > 0 {
		vline(p, r.StallAt, lo, hi, orange, "longest stall", named)
		vline(p, r.StallAt+r.StallSeconds, lo, hi, orange, "longest stall", named)
	}
	return p, nil
}

var palette = []color.Color{color.RGBA{R: 21, G: 101, B: 192, A: 255}, color.RGBA{R: 46, G: 125, B: 50, A: 255}}

// vline marks time x with a dashed line from lo to hi; the first of
// each legend goes in the plot's legend.
func vline(p *gplot.Plot, x, lo, hi float64, c color.Color, legend string, named map[string]bool) {
	l, err := plotter.NewLine(plotter.XYs{{X: x, Y: lo}, {X: x, Y: hi}})
	if err != nil {
		return
	}
	l.Color, l.Dashes = c, []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(l)
	if !named[legend] {
		named[legend] = true
		p.Legend.Add(legend, l)
	}
}

// eventMarks places each event of a shown kind, and each fault, on its
// row of rows (top down), with the node named beside failures, losses,
// drains and departures.
func (r *Run) eventMarks(rows []string) (plotter.XYs, []string) {
	t0 := r.start()
	row := func(kind string) float64 { return float64(len(rows) - slices.Index(rows, kind)) }
	var pts plotter.XYs
	var labels []string
	for _, e := range r.Events {
		if !slices.Contains(eventRows, e.Kind) {
			continue
		}
		pts = append(pts, plotter.XY{X: e.Time.Sub(t0).Seconds(), Y: row(e.Kind)})
		switch e.Kind {
		case api.EventFailed, api.EventLost, api.EventLoss, api.EventNotice, api.EventDrain, api.EventLeft, api.EventLeader:
			labels = append(labels, " "+e.Node)
		default:
			labels = append(labels, "")
		}
	}
	for _, f := range r.Faults {
		pts = append(pts, plotter.XY{X: f.Seconds, Y: row("fault")})
		labels = append(labels, " "+f.Action+" "+f.Node)
	}
	return pts, labels
}

// eventsPlot draws the coordinator's events, one row per kind
// (eventMarks).
func (r *Run) eventsPlot() (*gplot.Plot, error) {
	p := gplot.New()
	p.Title.Text = "Events (coordinator's timeline) and faults"
	p.X.Label.Text = "seconds after training started"
	rows := slices.Clone(eventRows)
	if len(r.Faults) > 0 {
		rows = append(rows, "fault")
	}
	var ticks []gplot.Tick
	for i, k := range rows {
		ticks = append(ticks, gplot.Tick{Value: float64(len(rows) - i), Label: k})
	}
	p.Y.Tick.Marker = gplot.ConstantTicks(ticks)
	p.Y.Min, p.Y.Max = 0.3, float64(len(rows))+0.7
	pts, labels := r.eventMarks(rows)
	if len(pts) == 0 {
		p.X.Min, p.X.Max = 0, 1
		return p, nil
	}
	s, err := plotter.NewScatter(pts)
	if err != nil {
		return nil, fmt.Errorf("plot: events: %w", err)
	}
	s.GlyphStyle.Shape = draw.CircleGlyph{}
	s.GlyphStyle.Radius = vg.Points(3)
	s.GlyphStyle.Color = color.RGBA{R: 198, G: 40, B: 40, A: 255}
	ls, err := plotter.NewLabels(plotter.XYLabels{XYs: pts, Labels: labels})
	if err != nil {
		return nil, fmt.Errorf("plot: events: %w", err)
	}
	for i := range ls.TextStyle {
		ls.TextStyle[i].Font.Size = vg.Points(8)
	}
	p.Add(s, ls)
	return p, nil
}
