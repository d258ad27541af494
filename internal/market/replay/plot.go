package replay

import (
	"fmt"
	"slices"

	"github.com/terrace-ml/terrace/internal/plotfile"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plot writes, for the first start, five panels over time (hours from
// the start): the reference type's lowest spot price with each policy's
// mean bid, transient and reliable machines held, the tier stage, and
// cumulative dollars. SVG or PNG by the file's extension. A policy that
// never bids (on-demand) is left out of the bid's panel, and one that
// never runs tiers out of the stage's: they were drawn as lines at 0, a
// bid of nothing and a stage 0 that no cluster has. The legends stand
// right of the panels, where they hide no curve.
func Plot(path string, rep *Report, names []string) error {
	panels := []struct {
		title, y string
		value    func(Sample) float64
		price    bool
		omitNone bool // leave out a policy whose value is 0 throughout
	}{
		{"spot price (lowest zone of the job's type) and mean bid", "$/hour", func(s Sample) float64 { return s.MeanBid }, true, true},
		{"transient machines", "machines", func(s Sample) float64 { return float64(s.Transient) }, false, false},
		{"reliable machines", "machines", func(s Sample) float64 { return float64(s.Reliable) }, false, false},
		{"stage (policies with tiers)", "stage", func(s Sample) float64 { return float64(s.Stage) }, false, true},
		{"dollars so far", "$", func(s Sample) float64 { return s.Dollars }, false, false},
	}
	// One time axis for every panel: the stage's, which draws only the
	// policies with tiers, ended where they did, under the others' end.
	hours := 0.0
	for _, name := range names {
		if tl := rep.Timelines[name]; len(tl) > 0 {
			hours = max(hours, tl[len(tl)-1].At.Sub(tl[0].At).Hours())
		}
	}
	plots := make([]*plot.Plot, len(panels))
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text, p.X.Label.Text, p.Y.Label.Text = pn.title, "hours from the start", pn.y
		p.X.Min, p.X.Max = 0, hours
		// Each policy keeps its colour and dashes in every panel, the
		// panels that leave some out too.
		for _, name := range drawn(rep, names, pn.value, pn.omitNone) {
			if err := addLine(p, slices.Index(names, name), name, points(rep.Timelines[name], pn.value)); err != nil {
				return err
			}
		}
		if tl := rep.Timelines[names[0]]; pn.price && len(tl) > 0 {
			if err := addLine(p, len(names), "spot price", points(tl, func(s Sample) float64 { return s.Price })); err != nil {
				return err
			}
		}
		plots[i] = p
	}
	return plotfile.WriteColumnLegendsOutside(path, plots, 27*vg.Centimeter, 7*vg.Centimeter)
}

// addLine draws xy on p in the style plotutil gives the style-th line,
// named in the legend.
func addLine(p *plot.Plot, style int, name string, xy plotter.XYs) error {
	l, err := plotter.NewLine(xy)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	l.Color, l.Dashes = plotutil.Color(style), plotutil.Dashes(style)
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

// drawn are the policies of names a panel of value draws: with omitNone,
// those whose value is not 0 throughout.
func drawn(rep *Report, names []string, value func(Sample) float64, omitNone bool) []string {
	if !omitNone {
		return names
	}
	var out []string
	for _, name := range names {
		if slices.ContainsFunc(rep.Timelines[name], func(s Sample) bool { return value(s) != 0 }) {
			out = append(out, name)
		}
	}
	return out
}

func points(tl []Sample, f func(Sample) float64) plotter.XYs {
	xy := make(plotter.XYs, len(tl))
	for i, s := range tl {
		xy[i].X, xy[i].Y = s.At.Sub(tl[0].At).Hours(), f(s)
	}
	return xy
}
