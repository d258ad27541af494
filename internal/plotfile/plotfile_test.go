package plotfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
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
