package checkpoint

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/terrace-ml/terrace/internal/crc32c"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/terrace-ml/terrace/table"
)

// Meta is what a checkpoint records besides the tables: where training
// was, so that a resumed run carries on from there.
type Meta struct {
	// Epoch is the layout epoch the tables were written under.
	Epoch uint64 `json:"epoch"`
	// Pass is the number of training passes completed.
	Pass int `json:"pass"`
	// Clocks are the workers' clocks, by worker.
	Clocks map[string]int64 `json:"clocks,omitempty"`
	// Partitions is each data partition's progress, by partition ID.
	Partitions map[int]PartitionProgress `json:"partitions,omitempty"`
	// Extra is stored as is for the caller (say, the app's config).
	Extra json.RawMessage `json:"extra,omitempty"`
}

// PartitionProgress is how far training got through one data partition.
type PartitionProgress struct {
	Passes int `json:"passes"` // passes over the partition completed
	Offset int `json:"offset"` // rows of the current pass consumed
}

// FileInfo describes one data file of a checkpoint.
type FileInfo struct {
	Name    string     `json:"name"`
	Table   string     `json:"table"`
	Spec    table.Spec `json:"spec"`
	Records int64      `json:"records"`
	Size    int64      `json:"size"`
	CRC     uint32     `json:"crc32c"` // of the whole file
}

// Checkpoint is a complete checkpoint: one whose MANIFEST was written.
type Checkpoint struct {
	Dir     string // DIR/ckpt-<seq>
	Seq     uint64
	Created time.Time
	Meta    Meta
	Files   []FileInfo // by name
}

// Writer writes one checkpoint. WriteTable may be called from several
// goroutines at once (one per server, say); Commit and Abort end it.
type Writer struct {
	root, dir string
	seq       uint64

	mu      sync.Mutex
	names   map[string]bool // taken by a finished or running WriteTable
	files   []FileInfo
	running int
	done    bool
}

// Create starts checkpoint seq in dir, creating dir if need be. seq must
// exceed that of every checkpoint directory already there, complete or
// not, so that checkpoints sort by age; NextSeq gives the smallest such.
func Create(dir string, seq uint64) (*Writer, error) {
	_, statErr := os.Stat(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint: create checkpoint dir: %w", err)
	}
	if errors.Is(statErr, fs.ErrNotExist) {
		if err := syncDir(filepath.Dir(filepath.Clean(dir))); err != nil {
			return nil, fmt.Errorf("checkpoint: create checkpoint dir: %w", err)
		}
	}
	seqs, err := list(dir)
	if err != nil {
		return nil, err
	}
	if len(seqs) > 0 && seq <= seqs[len(seqs)-1] {
		return nil, fmt.Errorf("checkpoint: create %d in %s: checkpoint %d exists; want a later sequence number", seq, dir, seqs[len(seqs)-1])
	}
	path := filepath.Join(dir, dirName(seq))
	if err := os.Mkdir(path, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint: create %d: %w", seq, err)
	}
	if err := syncDir(dir); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("checkpoint: create %d: %w", seq, err)
	}
	return &Writer{root: dir, dir: path, seq: seq, names: make(map[string]bool)}, nil
}

// NextSeq returns one more than the largest sequence number of a
// checkpoint directory in dir, complete or not, or 1 if there is none.
func NextSeq(dir string) (uint64, error) {
	seqs, err := list(dir)
	if err != nil || len(seqs) == 0 {
		return 1, err
	}
	if seqs[len(seqs)-1] == math.MaxUint64 {
		return 0, fmt.Errorf("checkpoint: %s: sequence numbers exhausted", dir)
	}
	return seqs[len(seqs)-1] + 1, nil
}

// Dir returns the directory the checkpoint is being written to.
func (w *Writer) Dir() string { return w.dir }

// WriteTable writes one data file, name (say "server-1.lr.weights"), of
// the table spec: every record that src hands to its callback, in that
// order, until src returns. src is typically a store.Table's Range over
// the key slots one server owns; the file is only as consistent as src is,
// so the caller quiesces updates first. The file is durable (written,
// synced, renamed, directory synced) when WriteTable returns nil. On error
// nothing is left behind under name.
func (w *Writer) WriteTable(ctx context.Context, name string, spec table.Spec, src func(fn func(key uint64, val []float32, state [][]float32) bool)) (FileInfo, error) {
	if err := checkName(name); err != nil {
		return FileInfo{}, fmt.Errorf("checkpoint: write table: %w", err)
	}
	if spec.Name == "" || spec.Width < 1 || spec.Width > table.MaxWidth {
		return FileInfo{}, fmt.Errorf("checkpoint: write %s: table %q of width %d: %w", name, spec.Name, spec.Width, table.ErrInvalid)
	}
	w.mu.Lock()
	switch {
	case w.done:
		w.mu.Unlock()
		return FileInfo{}, fmt.Errorf("checkpoint: write %s: checkpoint %d already committed or aborted", name, w.seq)
	case w.names[name]:
		w.mu.Unlock()
		return FileInfo{}, fmt.Errorf("checkpoint: write %s: file already written to checkpoint %d", name, w.seq)
	}
	w.names[name] = true
	w.running++
	w.mu.Unlock()

	fi, err := writeFile(ctx, w.dir, name, spec, src)

	w.mu.Lock()
	defer w.mu.Unlock()
	w.running--
	if err != nil {
		delete(w.names, name)
		return FileInfo{}, err
	}
	w.files = append(w.files, fi)
	return fi, nil
}

// Commit writes the MANIFEST, listing every file WriteTable wrote, and
// syncs it: from then on the checkpoint exists. Every WriteTable must have
// returned.
func (w *Writer) Commit(m Meta) (*Checkpoint, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return nil, fmt.Errorf("checkpoint: commit %d: already committed or aborted", w.seq)
	}
	if w.running > 0 {
		return nil, fmt.Errorf("checkpoint: commit %d: %d table writes still running", w.seq, w.running)
	}
	c := &Checkpoint{
		Dir:     w.dir,
		Seq:     w.seq,
		Created: time.Now().UTC().Truncate(time.Millisecond),
		Meta:    m,
		Files:   slices.Clone(w.files),
	}
	slices.SortFunc(c.Files, func(a, b FileInfo) int { return strings.Compare(a.Name, b.Name) })
	b, err := encodeManifest(c)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: commit %d: %w", w.seq, err)
	}
	if err := writeDurably(w.dir, manifestName, b); err != nil {
		return nil, fmt.Errorf("checkpoint: commit %d: %w", w.seq, err)
	}
	w.done = true
	return c, nil
}

// Abort removes the checkpoint being written. After Commit it does
// nothing, so that a deferred Abort is safe on every path.
func (w *Writer) Abort() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return nil
	}
	w.done = true
	if err := os.RemoveAll(w.dir); err != nil {
		return fmt.Errorf("checkpoint: abort %d: %w", w.seq, err)
	}
	return syncDir(w.root)
}

// checkName accepts names that stay inside the checkpoint directory and
// cannot be taken for a temporary file or the manifest.
func checkName(name string) error {
	if name == "" || len(name) > 200 || name == manifestName || name[0] == '.' ||
		strings.ContainsAny(name, "/\\\x00") {
		return fmt.Errorf("bad data file name %q", name)
	}
	return nil
}

func writeFile(ctx context.Context, dir, name string, spec table.Spec, src func(fn func(uint64, []float32, [][]float32) bool)) (_ FileInfo, err error) {
	tmp := filepath.Join(dir, tmpName(name))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return FileInfo{}, fmt.Errorf("checkpoint: write %s: %w", name, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	tw, err := newTableWriter(f, spec)
	if err != nil {
		return FileInfo{}, fmt.Errorf("checkpoint: write %s: %w", name, err)
	}
	src(func(key uint64, val []float32, state [][]float32) bool {
		if tw.err == nil {
			tw.add(ctx, key, val, state)
		}
		return tw.err == nil
	})
	if err := tw.finish(); err != nil {
		return FileInfo{}, fmt.Errorf("checkpoint: write %s: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		return FileInfo{}, fmt.Errorf("checkpoint: write %s: sync: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return FileInfo{}, fmt.Errorf("checkpoint: write %s: %w", name, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return FileInfo{}, fmt.Errorf("checkpoint: write %s: %w", name, err)
	}
	if err := syncDir(dir); err != nil {
		os.Remove(filepath.Join(dir, name))
		return FileInfo{}, fmt.Errorf("checkpoint: write %s: %w", name, err)
	}
	return FileInfo{Name: name, Table: spec.Name, Spec: spec, Records: tw.records, Size: tw.off, CRC: tw.fileCRC}, nil
}

// tableWriter encodes one data file: it gathers records into a block
// buffer and writes each full block with one write call.
type tableWriter struct {
	f            *os.File
	width, slots int
	recSize      int
	perBlock     int
	buf          []byte // block header, then n records
	n            int
	off          int64
	records      int64
	blocks       int64
	fileCRC      uint32 // of every byte written
	chain        uint32 // of the header's and each block's CRC
	err          error
}

func newTableWriter(f *os.File, spec table.Spec) (*tableWriter, error) {
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	hlen := headerFixed + len(js) + 4
	if hlen > maxHeader {
		return nil, fmt.Errorf("table spec of %d bytes is too large", len(js))
	}
	tw := &tableWriter{f: f, width: spec.Width, slots: spec.Rule.StateSlots()}
	tw.recSize = recordSize(tw.width, tw.slots)
	tw.perBlock = max(1, blockTarget/tw.recSize)
	tw.buf = make([]byte, blockHeader, blockHeader+tw.perBlock*tw.recSize)

	h := make([]byte, hlen)
	copy(h, fileMagic)
	binary.LittleEndian.PutUint16(h[4:], version)
	binary.LittleEndian.PutUint32(h[8:], uint32(hlen))
	binary.LittleEndian.PutUint32(h[12:], uint32(tw.width))
	binary.LittleEndian.PutUint32(h[16:], uint32(tw.slots))
	copy(h[headerFixed:], js)
	crc := crc32c.Checksum(h[:hlen-4])
	binary.LittleEndian.PutUint32(h[hlen-4:], crc)
	tw.chain = chainCRC(0, crc)
	tw.write(h)
	return tw, tw.err
}

func (tw *tableWriter) write(b []byte) {
	if tw.err != nil {
		return
	}
	if _, err := tw.f.Write(b); err != nil {
		tw.err = err
		return
	}
	tw.fileCRC = crc32c.Update(tw.fileCRC, b)
	tw.off += int64(len(b))
}

func (tw *tableWriter) add(ctx context.Context, key uint64, val []float32, state [][]float32) {
	if len(val) != tw.width || len(state) != tw.slots {
		tw.err = fmt.Errorf("record for key %d has %d floats and %d state planes; the table has width %d and %d", key, len(val), len(state), tw.width, tw.slots)
		return
	}
	b := tw.buf
	at := len(b)
	b = b[:at+tw.recSize]
	binary.LittleEndian.PutUint64(b[at:], key)
	at = putFloats(b, at+8, val)
	for _, p := range state {
		if len(p) != tw.width {
			tw.err = fmt.Errorf("record for key %d has a state plane of %d floats; the table has width %d", key, len(p), tw.width)
			return
		}
		at = putFloats(b, at, p)
	}
	tw.buf = b
	tw.n++
	if tw.n == tw.perBlock {
		tw.flush(ctx)
	}
}

func putFloats(b []byte, at int, v []float32) int {
	b = b[at : at+4*len(v)]
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return at + 4*len(v)
}

// flush writes the buffered records as one block. Cancellation is checked
// here, once per block, rather than per record.
func (tw *tableWriter) flush(ctx context.Context) {
	if err := ctx.Err(); err != nil {
		tw.err = err
		return
	}
	if tw.n == 0 {
		return
	}
	b := tw.buf
	copy(b, blockTag)
	binary.LittleEndian.PutUint32(b[4:], uint32(tw.n))
	binary.LittleEndian.PutUint32(b[8:], uint32(len(b)-blockHeader))
	crc := crc32c.Update(crc32c.Checksum(b[:12]), b[blockHeader:])
	binary.LittleEndian.PutUint32(b[12:], crc)
	tw.write(b)
	tw.chain = chainCRC(tw.chain, crc)
	tw.records += int64(tw.n)
	tw.blocks++
	tw.n = 0
	tw.buf = b[:blockHeader]
}

func (tw *tableWriter) finish() error {
	tw.flush(context.Background())
	if tw.err != nil {
		return tw.err
	}
	var t [trailerLen]byte
	copy(t[:], trailerMagic)
	binary.LittleEndian.PutUint64(t[8:], uint64(tw.blocks))
	binary.LittleEndian.PutUint64(t[16:], uint64(tw.records))
	binary.LittleEndian.PutUint32(t[24:], tw.chain)
	binary.LittleEndian.PutUint32(t[28:], crc32c.Checksum(t[:28]))
	tw.write(t[:])
	return tw.err
}

// writeDurably writes b to dir/name through a temporary file, so that
// name is either absent or whole, and syncs the file and the directory.
func writeDurably(dir, name string, b []byte) (err error) {
	tmp := filepath.Join(dir, tmpName(name))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(b); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return syncDir(dir)
}

func tmpName(name string) string { return "." + name + ".tmp" }

// syncDir makes the directory's entries (a rename, a new file) durable;
// without it a crash can lose a rename that the file's own sync did not
// cover.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}
