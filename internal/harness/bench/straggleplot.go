package bench

import (
	"fmt"

	"github.com/terrace-ml/terrace/internal/plotfile"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// PlotProgress draws, for each run, one panel of every worker's rows
// trained over time (SVG or PNG by the file's extension): the same
// pattern without and with reassignment shows the straggler's line
// flatten and the others' go on.
func PlotProgress(path string, titles []string, runs []*StragglerRun) error {
	var plots []*plot.Plot
	xmax := 0.0
	for _, r := range runs {
		for _, p := range r.Trace {
			xmax = max(xmax, p.Seconds)
		}
	}
	for i, r := range runs {
		p := plot.New()
		p.Title.Text, p.X.Label.Text, p.Y.Label.Text = titles[i], "seconds", "examples trained by the worker"
		p.X.Min, p.X.Max = 0, xmax
		byRank := map[int]plotter.XYs{}
		ranks := 0
		for _, pt := range r.Trace {
			byRank[pt.Rank] = append(byRank[pt.Rank], plotter.XY{X: pt.Seconds, Y: float64(pt.Rows)})
			ranks = max(ranks, pt.Rank+1)
		}
		var series []any
		for rank := range ranks {
			series = append(series, fmt.Sprintf("worker %d", rank), thin(byRank[rank], 400))
		}
		if err := plotutil.AddLines(p, series...); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		p.Legend.Top, p.Legend.Left = true, true
		plots = append(plots, p)
	}
	return plotfile.WriteColumn(path, plots, 18*vg.Centimeter, 8*vg.Centimeter)
}

// thin keeps at most n points of xy, evenly spaced, and the last.
func thin(xy plotter.XYs, n int) plotter.XYs {
	if len(xy) <= n {
		return xy
	}
	out := make(plotter.XYs, 0, n+1)
	for i := 0; i < len(xy); i += (len(xy) + n - 1) / n {
		out = append(out, xy[i])
	}
	return append(out, xy[len(xy)-1])
}
