package data

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeIDX writes a pair of IDX files of n images of 2x2 pixels under dir
// and returns the images file's path; cut shortens the images file.
func writeIDX(t *testing.T, dir string, n int, gz bool, cut int) string {
	t.Helper()
	img := binary.BigEndian.AppendUint32(nil, 0x803)
	img = binary.BigEndian.AppendUint32(img, uint32(n))
	img = binary.BigEndian.AppendUint32(img, 2)
	img = binary.BigEndian.AppendUint32(img, 2)
	lab := binary.BigEndian.AppendUint32(nil, 0x801)
	lab = binary.BigEndian.AppendUint32(lab, uint32(n))
	for i := range n {
		img = append(img, 0, byte(255*(i%2)), 51, 0)
		lab = append(lab, byte(i%3))
	}
	img = img[:len(img)-cut]
	if gz {
		img, lab = gzipped(t, img), gzipped(t, lab)
	}
	path := filepath.Join(dir, "train-images-idx3-ubyte.gz")
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "train-labels-idx1-ubyte.gz"), lab, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReadClassesIDX(t *testing.T) {
	for _, gz := range []bool{false, true} {
		c, err := ReadClasses(writeIDX(t, t.TempDir(), 4, gz, 0))
		if err != nil {
			t.Fatal(err)
		}
		if c.Len() != 4 || c.NumClasses != 3 || c.Class[2] != 2 || c.X.NumFeatures != 5 {
			t.Fatalf("gzip %v: %d rows, %d classes, classes %v, %d features", gz, c.Len(), c.NumClasses, c.Class, c.X.NumFeatures)
		}
		keys, vals, _ := c.X.Row(1)
		if len(keys) != 2 || keys[0] != 2 || keys[1] != 3 || vals[0] != 1 || vals[1] != 0.2 {
			t.Errorf("row 1: keys %v values %v; want pixels 2 and 3 (1-based) at 1 and 0.2", keys, vals)
		}
		if keys, _, _ := c.X.Row(0); len(keys) != 1 {
			t.Errorf("row 0: keys %v; black pixels are left out", keys)
		}
	}
}

func TestReadClassesBad(t *testing.T) {
	dir := t.TempDir()
	truncated := writeIDX(t, dir, 4, true, 3)
	if _, err := ReadClasses(truncated); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "truncated: image 4 of 4") {
		t.Errorf("truncated images: %v", err)
	}
	other := filepath.Join(t.TempDir(), "digits.idx")
	raw, _ := os.ReadFile(writeIDX(t, t.TempDir(), 2, false, 0))
	os.WriteFile(other, raw, 0o644)
	if _, err := ReadClasses(other); err == nil || !strings.Contains(err.Error(), `no "images-idx3"`) {
		t.Errorf("images file of another name: %v", err)
	}
	labels := strings.Replace(writeIDX(t, t.TempDir(), 2, true, 0), "images-idx3", "labels-idx1", 1)
	if _, err := ReadClasses(labels); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "an IDX labels file: give the images file") {
		t.Errorf("the labels file given for the images: %v", err)
	}
	// A test set's labels name the test set's images (the message named
	// train-images-idx3-ubyte.gz for --test t10k-labels-idx1-ubyte.gz).
	t10k := filepath.Join(filepath.Dir(labels), "t10k-labels-idx1-ubyte.gz")
	if err := os.Rename(labels, t10k); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadClasses(t10k); err == nil || !strings.Contains(err.Error(), "give the images file (t10k-images-idx3-ubyte.gz)") {
		t.Errorf("the test set's labels file given for its images: %v", err)
	}
	fewer := writeIDX(t, t.TempDir(), 3, false, 0)
	lab := binary.BigEndian.AppendUint32(nil, 0x801)
	lab = binary.BigEndian.AppendUint32(lab, 2)
	os.WriteFile(strings.Replace(fewer, "images-idx3", "labels-idx1", 1), append(lab, 1, 2), 0o644)
	if _, err := ReadClasses(fewer); err == nil || !strings.Contains(err.Error(), "3 images, but") {
		t.Errorf("fewer labels than images: %v", err)
	}
	text := filepath.Join(t.TempDir(), "multi.svm")
	os.WriteFile(text, []byte("3 1:1\n0 2:0.5\n1.5 1:1\n"), 0o644)
	if _, err := ReadClasses(text); err == nil || !strings.Contains(err.Error(), "multi.svm:3: label 1.5 is not a class number") {
		t.Errorf("a fractional class: %v", err)
	}
}

func TestReadClassesLIBSVM(t *testing.T) {
	text := filepath.Join(t.TempDir(), "multi.svm")
	os.WriteFile(text, []byte("3 1:1\n0 2:0.5\n\n7 1:1 4:2\n"), 0o644)
	c, err := ReadClasses(text)
	if err != nil {
		t.Fatal(err)
	}
	if c.Len() != 3 || c.NumClasses != 8 || c.Class[0] != 3 || c.Class[2] != 7 || c.X.NumFeatures != 5 {
		t.Errorf("%d rows, %d classes %v, %d features", c.Len(), c.NumClasses, c.Class, c.X.NumFeatures)
	}
}

func TestReadClassesMNIST(t *testing.T) {
	path, ok := SharedPath("images/mnist/t10k-images-idx3-ubyte.gz")
	if !ok {
		t.Skip("MNIST not found under ../shared/data/images/mnist")
	}
	c, err := ReadClasses(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Len() != 10000 || c.NumClasses != 10 || c.X.NumFeatures != 785 {
		t.Errorf("%d rows, %d classes, %d features; want 10,000, 10, 785", c.Len(), c.NumClasses, c.X.NumFeatures)
	}
}
