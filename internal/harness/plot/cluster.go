package plot

import (
	"fmt"
	"image/color"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// clusterPlots draws the coordinator's samples of the cluster, when the
// report has them: machines by class and the stage in one panel (both
// small integers), and the dollars so far in another when the
// coordinator knew the prices.
func (r *Run) clusterPlots() ([]*gplot.Plot, error) {
	if len(r.History) == 0 {
		return nil, nil
	}
	t0 := r.start()
	if t0.IsZero() {
		t0 = r.History[0].Time
	}
	at := func(s api.Sample) float64 { return s.Time.Sub(t0).Seconds() }
	machines := gplot.New()
	machines.Title.Text = "Machines by class, and the stage"
	machines.X.Label.Text = "seconds after training started"
	machines.Y.Label.Text = "machines, stage"
	machines.Y.Min = 0
	machines.Legend.Top = true
	var reliable, transient, stage plotter.XYs
	var dollars plotter.XYs
	for _, s := range r.History {
		x := at(s)
		reliable = append(reliable, plotter.XY{X: x, Y: float64(s.Machines.Reliable)})
		transient = append(transient, plotter.XY{X: x, Y: float64(s.Machines.Transient)})
		stage = append(stage, plotter.XY{X: x, Y: float64(s.Stage)})
		if s.Dollars != nil {
			dollars = append(dollars, plotter.XY{X: x, Y: *s.Dollars})
		}
	}
	for _, l := range []struct {
		name   string
		pts    plotter.XYs
		c      color.Color
		dashed bool
	}{
		{"reliable machines", reliable, palette[0], false},
		{"transient machines", transient, color.RGBA{R: 239, G: 108, B: 0, A: 255}, false},
		{"stage", stage, color.RGBA{R: 106, G: 27, B: 154, A: 255}, true},
	} {
		line, err := plotter.NewLine(l.pts)
		if err != nil {
			return nil, fmt.Errorf("plot: %s: %w", l.name, err)
		}
		line.StepStyle = plotter.PostStep
		line.Color, line.Width = l.c, vg.Points(1.5)
		if l.dashed {
			line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		machines.Add(line)
		machines.Legend.Add(l.name, line)
	}
	machines.Y.Max = max(machines.Y.Max, 3) + 0.5
	out := []*gplot.Plot{machines}
	if len(dollars) == 0 {
		return out, nil
	}
	cost := gplot.New()
	cost.Title.Text = "Cost so far (the coordinator's prices)"
	cost.X.Label.Text = "seconds after training started"
	cost.Y.Label.Text = "dollars"
	cost.Y.Min = 0
	line, err := plotter.NewLine(dollars)
	if err != nil {
		return nil, fmt.Errorf("plot: dollars: %w", err)
	}
	line.Color, line.Width = palette[1], vg.Points(1.5)
	cost.Add(line)
	return append(out, cost), nil
}
