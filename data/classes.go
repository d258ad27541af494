package data

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// MaxClasses bounds a class number: Classes stores them as uint16.
const MaxClasses = 1 << 16

// Classes is multi-class data: the rows of X (whose Labels hold each
// row's class number as a float) and Class, the same numbers.
// NumClasses is the largest class number plus one.
type Classes struct {
	X          *Sparse
	Class      []uint16
	NumClasses int
}

// Len returns the number of rows.
func (c *Classes) Len() int { return len(c.Class) }

// ReadClasses reads multi-class data from path: LIBSVM lines whose labels
// are class numbers (0 to MaxClasses-1, as LIBSVM's multi-class sets
// write them, e.g. mnist.scale, 0-9), or MNIST's IDX files (plain or
// gzip), named by the images file: the labels are read from the file of
// the same name with "images-idx3" replaced by "labels-idx1"
// (train-images-idx3-ubyte.gz and train-labels-idx1-ubyte.gz). An IDX
// image's pixels become features 1 to rows x cols, row by row, valued
// byte/255; black pixels are left out.
func ReadClasses(path string) (*Classes, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br, err := maybeGunzip(f, path)
	if err != nil {
		return nil, err
	}
	if magic, err := br.Peek(4); err == nil && magic[0] == 0 && magic[1] == 0 && magic[2] == 8 {
		switch magic[3] {
		case 3:
			return readIDX(br, path)
		case 1:
			// Read as LIBSVM it was "label \x00\x00\b\x01... is not a number".
			return nil, idxError(path, fmt.Sprintf("an IDX labels file: give the images file (%s), whose labels are read from the labels file beside it", imagesFile(path)), nil)
		}
	}
	x, err := parseLIBSVM(br, path, classLabels)
	if err != nil {
		return nil, err
	}
	c := &Classes{X: x, Class: make([]uint16, x.Len())}
	for i, v := range x.Labels {
		c.Class[i] = uint16(v)
		c.NumClasses = max(c.NumClasses, int(v)+1)
	}
	return c, nil
}

// imagesFile names the IDX images file that labels file path goes with,
// for a message: t10k-labels-idx1-ubyte.gz's is t10k-images-idx3-ubyte.gz
// (the message named train's whatever the file).
func imagesFile(path string) string {
	if base := filepath.Base(path); strings.Contains(base, "labels-idx1") {
		return strings.Replace(base, "labels-idx1", "images-idx3", 1)
	}
	return "train-images-idx3-ubyte.gz"
}

// labelsFile is the IDX labels file that goes with images file path.
func labelsFile(path string) (string, bool) {
	if !strings.Contains(path, "images-idx3") {
		return "", false
	}
	return strings.Replace(path, "images-idx3", "labels-idx1", 1), true
}

// idxError is a malformed IDX file (no lines: Line 0).
func idxError(name, reason string, err error) error {
	return &LineError{File: name, Reason: reason, Err: err}
}

// readIDX reads an IDX images file (magic 0x00000803: count, rows, cols,
// then a byte a pixel) from br and its labels file (0x00000801: count,
// then a byte a label).
func readIDX(br *bufio.Reader, name string) (*Classes, error) {
	var hdr [16]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return nil, idxError(name, "truncated IDX header", err)
	}
	n, rows, cols := binary.BigEndian.Uint32(hdr[4:]), binary.BigEndian.Uint32(hdr[8:]), binary.BigEndian.Uint32(hdr[12:])
	if rows == 0 || cols == 0 || uint64(rows)*uint64(cols) > 1<<24 {
		return nil, idxError(name, fmt.Sprintf("IDX images of %d x %d pixels", rows, cols), nil)
	}
	lpath, ok := labelsFile(name)
	if !ok {
		return nil, idxError(name, `an IDX images file whose name has no "images-idx3" to find its labels file by`, nil)
	}
	labels, err := readIDXLabels(lpath)
	if err != nil {
		return nil, err
	}
	if uint32(len(labels)) != n {
		return nil, idxError(name, fmt.Sprintf("%d images, but %s holds %d labels", n, lpath, len(labels)), nil)
	}
	var b sparseBuilder
	b.rowPtr.add(0)
	c := &Classes{Class: labels}
	px := make([]byte, rows*cols)
	for i := range n {
		if _, err := io.ReadFull(br, px); err != nil {
			return nil, idxError(name, fmt.Sprintf("truncated: image %d of %d", i+1, n), err)
		}
		for j, v := range px {
			if v != 0 {
				b.keys.add(uint64(j) + 1)
				b.vals.add(float32(v) / 255)
			}
		}
		b.labels.add(float32(labels[i]))
		b.rowPtr.add(b.keys.len())
		c.NumClasses = max(c.NumClasses, int(labels[i])+1)
	}
	if err := atEnd(br, name, fmt.Sprintf("its %d images", n)); err != nil {
		return nil, err
	}
	c.X = &Sparse{Labels: b.labels.slice(), RowPtr: b.rowPtr.slice(), Keys: b.keys.slice(), Vals: b.vals.slice(), NumFeatures: uint64(rows*cols) + 1}
	return c, nil
}

// atEnd checks that br holds nothing after what, and that a gzip stream
// ends sound (its checksum is checked at its end).
func atEnd(br *bufio.Reader, name, what string) error {
	switch _, err := br.ReadByte(); {
	case err == nil:
		return idxError(name, "more bytes after "+what, nil)
	case !errors.Is(err, io.EOF):
		return idxError(name, "truncated or corrupt input after "+what+": "+err.Error(), err)
	}
	return nil
}

func readIDXLabels(path string) ([]uint16, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("the IDX images' labels: %w", err)
	}
	defer f.Close()
	br, err := maybeGunzip(f, path)
	if err != nil {
		return nil, err
	}
	var hdr [8]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return nil, idxError(path, "truncated IDX header", err)
	}
	if m := binary.BigEndian.Uint32(hdr[:]); m != 0x801 {
		return nil, idxError(path, fmt.Sprintf("magic %#08x: not an IDX labels file (0x00000801)", m), nil)
	}
	n := binary.BigEndian.Uint32(hdr[4:])
	if n > 1<<28 {
		return nil, idxError(path, fmt.Sprintf("%d labels", n), nil)
	}
	raw := make([]byte, n)
	if _, err := io.ReadFull(br, raw); err != nil {
		return nil, idxError(path, fmt.Sprintf("truncated: %d labels announced", n), err)
	}
	if err := atEnd(br, path, fmt.Sprintf("its %d labels", n)); err != nil {
		return nil, err
	}
	out := make([]uint16, n)
	for i, v := range raw {
		out[i] = uint16(v)
	}
	return out, nil
}
