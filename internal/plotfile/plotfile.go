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
func WriteColumn(path string, plots []*plot.Plot, width, panelHeight vg.Length) error {
	if err := Check(path); err != nil {
		return fmt.Errorf("plot %w", err)
	}
	h := vg.Length(len(plots)) * panelHeight
	var canvas vg.CanvasWriterTo = vgsvg.New(width, h)
	if strings.ToLower(filepath.Ext(path)) == ".png" {
		canvas = vgimg.PngCanvas{Canvas: vgimg.New(width, h)}
	}
	rows := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		rows[i] = []*plot.Plot{p}
	}
	pad := vg.Millimeter * 3
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadY: vg.Centimeter, PadTop: pad, PadBottom: pad, PadLeft: pad, PadRight: pad}
	for i, cs := range plot.Align(rows, tiles, draw.New(canvas)) {
		rows[i][0].Draw(cs[0])
	}
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
