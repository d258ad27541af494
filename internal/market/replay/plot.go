package replay

import (
	"fmt"

	"github.com/terrace-ml/terrace/internal/plotfile"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plot writes, for the first start, five panels over time (hours from
// the start): the reference type's lowest spot price with each policy's
// mean bid, transient and reliable machines held, the tier stage, and
// cumulative dollars. SVG or PNG by the file's extension.
func Plot(path string, rep *Report, names []string) error {
	panels := []struct {
		title, y string
		value    func(Sample) float64
		price    bool
	}{
		{"spot price (lowest zone of the job's type) and mean bid", "$/hour", func(s Sample) float64 { return s.MeanBid }, true},
		{"transient machines", "machines", func(s Sample) float64 { return float64(s.Transient) }, false},
		{"reliable machines", "machines", func(s Sample) float64 { return float64(s.Reliable) }, false},
		{"stage", "stage", func(s Sample) float64 { return float64(s.Stage) }, false},
		{"dollars so far", "$", func(s Sample) float64 { return s.Dollars }, false},
	}
	plots := make([]*plot.Plot, len(panels))
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text, p.X.Label.Text, p.Y.Label.Text = pn.title, "hours from the start", pn.y
		var series []any
		for _, name := range names {
			series = append(series, name, points(rep.Timelines[name], pn.value))
		}
		if tl := rep.Timelines[names[0]]; pn.price && len(tl) > 0 {
			series = append(series, "spot price", points(tl, func(s Sample) float64 { return s.Price }))
		}
		if err := plotutil.AddLines(p, series...); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		p.Legend.Top = true
		plots[i] = p
	}
	return plotfile.WriteColumn(path, plots, 22*vg.Centimeter, 7*vg.Centimeter)
}

func points(tl []Sample, f func(Sample) float64) plotter.XYs {
	xy := make(plotter.XYs, len(tl))
	for i, s := range tl {
		xy[i].X, xy[i].Y = s.At.Sub(tl[0].At).Hours(), f(s)
	}
	return xy
}
