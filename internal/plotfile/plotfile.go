package plotfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Check refuses a path WriteColumn cannot write: one that ends neither in
// .svg nor .png. A command checks its plot's path before its work, which
// the plot ends.
func Check(path string) error {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg", ".png":
		return nil
	}
	return fmt.Errorf("%s: want a .svg or .png file", path)
}

// WriteColumn draws plots one above the other, each panel width wide and
// panelHeight high, on a shared left edge, and writes them to path as SVG
// (.svg) or PNG (.png); any other extension is an error naming the file.
// Each legend is drawn where its plot puts it, inside the data area.
func WriteColumn(path string, plots []*plot.Plot, width, panelHeight vg.Length) error {
	return write(path, plots, width, panelHeight, false)
}

// WriteColumnLegendsOutside is WriteColumn with every legend drawn to the
// right of its panel's data, in a strip as wide as the widest legend:
// curves that fill their panel (a replay's prices, machines and dollars)
// were hidden under a legend at their top right.
func WriteColumnLegendsOutside(path string, plots []*plot.Plot, width, panelHeight vg.Length) error {
	return write(path, plots, width, panelHeight, true)
}

func write(path string, plots []*plot.Plot, width, panelHeight vg.Length, outside bool) error {
	if err := Check(path); err != nil {
		return fmt.Errorf("plot %w", err)
	}
	h := vg.Length(len(plots)) * panelHeight
	var canvas vg.CanvasWriterTo = vgsvg.New(width, h)
	if strings.ToLower(filepath.Ext(path)) == ".png" {
		canvas = vgimg.PngCanvas{Canvas: vgimg.New(width, h)}
	}
	drawColumn(draw.New(canvas), plots, outside)
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := canvas.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return f.Close()
}

// drawColumn draws plots one above the other on c; with outside, each
// legend in a strip at the right of its panel (the plots' own legends
// are emptied, so that none is drawn twice).
func drawColumn(c draw.Canvas, plots []*plot.Plot, outside bool) {
	rows := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		rows[i] = []*plot.Plot{p}
	}
	pad := vg.Millimeter * 3
	var strip vg.Length
	legends := make([]plot.Legend, len(plots))
	if outside {
		for i, p := range plots {
			r := p.Legend.Rectangle(c)
			strip = max(strip, r.Max.X-r.Min.X)
			legends[i] = p.Legend
			p.Legend = plot.NewLegend()
		}
		if strip > 0 {
			strip += 2 * pad
		}
	}
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadY: vg.Centimeter, PadTop: pad, PadBottom: pad, PadLeft: pad, PadRight: pad}
	for i, cs := range plot.Align(rows, tiles, c) {
		p := rows[i][0]
		if strip == 0 {
			p.Draw(cs[0])
			continue
		}
		p.Draw(draw.Crop(cs[0], 0, -strip, 0, 0))
		l := legends[i]
		l.Top, l.Left, l.XOffs, l.YOffs = true, true, 0, 0
		l.Draw(draw.Crop(cs[0], cs[0].Max.X-cs[0].Min.X-strip+2*pad, 0, 0, 0))
		p.Legend = l
	}
}
