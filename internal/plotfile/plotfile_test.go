package plotfile

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/recorder"
)

func TestWriteColumn(t *testing.T) {
	dir := t.TempDir()
	plots := []*plot.Plot{plot.New(), plot.New()}
	for _, name := range []string{"a.svg", "a.png"} {
		path := filepath.Join(dir, name)
		if err := WriteColumn(path, plots, 10*vg.Centimeter, 5*vg.Centimeter); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
			t.Fatalf("%s: %v, %v", name, fi, err)
		}
	}
	err := WriteColumn(filepath.Join(dir, "a.pdf"), plots, vg.Centimeter, vg.Centimeter)
	if err == nil || !strings.Contains(err.Error(), "a.pdf") {
		t.Fatalf("a .pdf file: %v, want an error naming it", err)
	}
}

// TestLegendsOutside: with the legends outside, a legend's text is drawn
// right of every curve, where it hides none. A replay's legends sat over
// its curves' top right.
func TestLegendsOutside(t *testing.T) {
	for _, outside := range []bool{false, true} {
		p := plot.New()
		l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 1}})
		if err != nil {
			t.Fatal(err)
		}
		p.Add(l)
		p.Legend.Add("a curve", l)
		p.Legend.Top = true
		var rec recorder.Canvas
		drawColumn(draw.NewCanvas(&rec, 20*vg.Centimeter, 8*vg.Centimeter), []*plot.Plot{p}, outside)
		right, text := vg.Length(math.Inf(-1)), vg.Length(math.NaN())
		for _, a := range rec.Actions {
			switch a := a.(type) {
			case *recorder.Stroke: // the curve: two points at different heights
				if len(a.Path) == 2 && a.Path[0].Pos.Y != a.Path[1].Pos.Y {
					right = max(right, a.Path[0].Pos.X, a.Path[1].Pos.X)
				}
			case *recorder.FillString:
				if a.String == "a curve" {
					text = a.Point.X
				}
			}
		}
		if outside != (text > right) || text > 20*vg.Centimeter {
			t.Errorf("outside %v: the legend's text at x %v, the curve's right end at %v", outside, text, right)
		}
	}
}
