package checkpoint

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/terrace-ml/terrace/internal/crc32c"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/terrace-ml/terrace/table"
)

// File returns the listed data file called name.
func (c *Checkpoint) File(name string) (FileInfo, bool) {
	for _, fi := range c.Files {
		if fi.Name == name {
			return fi, true
		}
	}
	return FileInfo{}, false
}

// ReadTable streams the records of data file name to fn, in the order they
// were written. The slices passed to fn are reused: they are valid only
// during the call (store.Table.Load copies them). It checks the header
// against the manifest's spec, every block's CRC, the trailer's counts and
// CRC of CRCs, and the whole file's size and CRC; a mismatch is a
// *CorruptError (ErrCorrupt) naming the file and offset. As the file is
// streamed, fn may have seen records before the error: a caller that gets
// one discards what it loaded. An error from fn stops the read and is
// returned wrapped.
func (c *Checkpoint) ReadTable(ctx context.Context, name string, fn func(key uint64, val []float32, state [][]float32) error) error {
	fi, ok := c.File(name)
	if !ok {
		return fmt.Errorf("checkpoint: read %s: no such file in checkpoint %d", name, c.Seq)
	}
	path := filepath.Join(c.Dir, name)
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: read %s: %w", ErrCorrupt, path, err)
	}
	defer f.Close()
	r := &tableReader{path: path, r: &crcReader{r: bufio.NewReaderSize(f, 64<<10)}}
	if err := r.read(ctx, fi, fn); err != nil {
		return err
	}
	return nil
}

type tableReader struct {
	path string
	r    *crcReader
}

func (tr *tableReader) corrupt(off int64, format string, args ...any) error {
	return &CorruptError{Path: tr.path, Offset: off, Reason: fmt.Sprintf(format, args...)}
}

// full reads len(b) bytes of the part of the file that starts at off; a
// short read is a torn or truncated file.
func (tr *tableReader) full(b []byte, off int64, what string) error {
	_, err := io.ReadFull(tr.r, b)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return tr.corrupt(off, "file ends at byte %d, inside the %s: a torn write or truncation", tr.r.n, what)
	case err != nil:
		return fmt.Errorf("checkpoint: read %s: %w", tr.path, err)
	}
	return nil
}

func (tr *tableReader) read(ctx context.Context, fi FileInfo, fn func(uint64, []float32, [][]float32) error) error {
	width, slots, crc, err := tr.header(fi)
	if err != nil {
		return err
	}
	chain := chainCRC(0, crc)
	b := blockReader{recSize: recordSize(width, slots), width: width, vals: make([]float32, width*(1+slots))}
	b.state = make([][]float32, slots)
	for p := range b.state {
		b.state[p] = b.vals[(p+1)*width : (p+2)*width]
	}
	var blocks, records int64
	for {
		off := tr.r.n
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := tr.full(b.hdr[:4], off, "block or trailer"); err != nil {
			return err
		}
		if string(b.hdr[:4]) == trailerMagic {
			var t [trailerLen]byte
			copy(t[:], b.hdr[:4])
			if err := tr.full(t[4:], off, "trailer"); err != nil {
				return err
			}
			return tr.trailer(t[:], off, blocks, records, chain, fi)
		}
		n, want, err := tr.block(&b, off, fn)
		if err != nil {
			return err
		}
		chain = chainCRC(chain, want)
		blocks++
		records += n
	}
}

// header reads and checks the file's header against the manifest's entry,
// and returns the table's width, state slots and the header's CRC.
func (tr *tableReader) header(fi FileInfo) (width, slots int, crc uint32, err error) {
	var fixed [12]byte
	if err := tr.full(fixed[:], 0, "header"); err != nil {
		return 0, 0, 0, err
	}
	if string(fixed[:4]) != fileMagic {
		return 0, 0, 0, tr.corrupt(0, "bad magic %q", fixed[:4])
	}
	hlen := int64(binary.LittleEndian.Uint32(fixed[8:]))
	if hlen < headerFixed+4 || hlen > maxHeader {
		return 0, 0, 0, tr.corrupt(0, "header length %d out of range", hlen)
	}
	h := make([]byte, hlen)
	copy(h, fixed[:])
	if err := tr.full(h[12:], 0, "header"); err != nil {
		return 0, 0, 0, err
	}
	crc = binary.LittleEndian.Uint32(h[hlen-4:])
	if got := crc32c.Checksum(h[:hlen-4]); got != crc {
		return 0, 0, 0, tr.corrupt(0, "header checksum %08x, want %08x", got, crc)
	}
	if v := binary.LittleEndian.Uint16(h[4:]); v != version {
		return 0, 0, 0, fmt.Errorf("checkpoint: read %s: data file version %d, want %d", tr.path, v, version)
	}
	var spec table.Spec
	if err := json.Unmarshal(h[headerFixed:hlen-4], &spec); err != nil {
		return 0, 0, 0, tr.corrupt(0, "table spec: %v", err)
	}
	width, slots = int(binary.LittleEndian.Uint32(h[12:])), int(binary.LittleEndian.Uint32(h[16:]))
	if width != spec.Width || slots != spec.Rule.StateSlots() || width < 1 || width > table.MaxWidth {
		return 0, 0, 0, tr.corrupt(0, "width %d and %d state slots do not fit the spec (width %d, rule %q)", width, slots, spec.Width, spec.Rule.Kind)
	}
	if spec != fi.Spec {
		return 0, 0, 0, tr.corrupt(0, "table spec %+v differs from the manifest's %+v", spec, fi.Spec)
	}
	return width, slots, crc, nil
}

// blockReader holds one table file's record layout and the buffers its
// blocks are decoded into, reused from block to block.
type blockReader struct {
	recSize, width int
	hdr            [blockHeader]byte
	payload        []byte
	vals           []float32
	state          [][]float32
}

// block reads the rest of the block whose tag b.hdr[:4] holds, checks it,
// and passes its records to fn; it returns the block's record count and CRC.
func (tr *tableReader) block(b *blockReader, off int64, fn func(uint64, []float32, [][]float32) error) (int64, uint32, error) {
	hdr := b.hdr[:]
	if string(hdr[:4]) != blockTag {
		return 0, 0, tr.corrupt(off, "bad block tag %q", hdr[:4])
	}
	if err := tr.full(hdr[4:], off, "block header"); err != nil {
		return 0, 0, err
	}
	n, plen := int64(binary.LittleEndian.Uint32(hdr[4:])), int64(binary.LittleEndian.Uint32(hdr[8:]))
	if n < 1 || plen != n*int64(b.recSize) || plen > maxPayload {
		// The CRC covers these fields too, but it cannot be checked
		// before reading a payload whose length is not to be trusted.
		return 0, 0, tr.corrupt(off, "block of %d records with a %d-byte payload (records are %d bytes)", n, plen, b.recSize)
	}
	if int64(cap(b.payload)) < plen {
		b.payload = make([]byte, plen)
	}
	payload := b.payload[:plen]
	if err := tr.full(payload, off, "block"); err != nil {
		return 0, 0, err
	}
	want := binary.LittleEndian.Uint32(hdr[12:])
	if got := crc32c.Update(crc32c.Checksum(hdr[:12]), payload); got != want {
		return 0, 0, tr.corrupt(off, "block checksum %08x, want %08x", got, want)
	}
	for p := payload; len(p) > 0; p = p[b.recSize:] {
		key := binary.LittleEndian.Uint64(p)
		fb := p[8:b.recSize]
		for i := range b.vals {
			b.vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(fb[4*i:]))
		}
		if err := fn(key, b.vals[:b.width], b.state); err != nil {
			return 0, 0, fmt.Errorf("checkpoint: read %s: %w", tr.path, err)
		}
	}
	return n, want, nil
}

func (tr *tableReader) trailer(t []byte, off, blocks, records int64, chain uint32, fi FileInfo) error {
	if got, want := crc32c.Checksum(t[:28]), binary.LittleEndian.Uint32(t[28:]); got != want {
		return tr.corrupt(off, "trailer checksum %08x, want %08x", got, want)
	}
	if b, r := int64(binary.LittleEndian.Uint64(t[8:])), int64(binary.LittleEndian.Uint64(t[16:])); b != blocks || r != records {
		return tr.corrupt(off, "trailer counts %d blocks and %d records, the file has %d and %d", b, r, blocks, records)
	}
	if want := binary.LittleEndian.Uint32(t[24:]); want != chain {
		return tr.corrupt(off, "checksum of block checksums %08x, want %08x: blocks missing, repeated or reordered", chain, want)
	}
	end := tr.r.n
	var one [1]byte
	if n, _ := io.ReadFull(tr.r, one[:]); n > 0 {
		return tr.corrupt(end, "bytes after the trailer")
	}
	if records != fi.Records || end != fi.Size || tr.r.crc != fi.CRC {
		return tr.corrupt(0, "file has %d records, %d bytes, CRC32C %08x; the manifest says %d, %d, %08x",
			records, end, tr.r.crc, fi.Records, fi.Size, fi.CRC)
	}
	return nil
}

// crcReader counts and checksums the bytes read through it.
type crcReader struct {
	r   io.Reader
	n   int64
	crc uint32
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.crc = crc32c.Update(c.crc, p[:n])
	return n, err
}

// checkFile reports whether path has the size and CRC32C fi lists, reading
// it whole.
func checkFile(ctx context.Context, path string, fi FileInfo, buf []byte) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if st.Size() != fi.Size {
		return fmt.Errorf("%w: %s is %d bytes, the manifest says %d", ErrCorrupt, path, st.Size(), fi.Size)
	}
	var crc uint32
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := f.Read(buf)
		crc = crc32c.Update(crc, buf[:n])
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("checkpoint: read %s: %w", path, err)
		}
	}
	if crc != fi.CRC {
		return fmt.Errorf("%w: %s has CRC32C %08x, the manifest says %08x", ErrCorrupt, path, crc, fi.CRC)
	}
	return nil
}
