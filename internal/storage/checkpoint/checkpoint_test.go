package checkpoint

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/terrace-ml/terrace/internal/storage/store"
	"github.com/terrace-ml/terrace/table"
)

func newStore(t testing.TB, spec table.Spec) (*store.Table, table.Spec) {
	t.Helper()
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	tb, err := store.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	return tb, spec
}

// fill pushes a few rounds of random gradients to keys, so that values and
// every optimizer state plane hold something other than their initial
// values.
func fill(tb *store.Table, width int, keys []uint64, rng *rand.Rand) {
	g := make([]float32, len(keys)*width)
	for range 3 {
		for i := range g {
			g[i] = rng.Float32()*2 - 1
		}
		tb.Push(keys, g)
	}
}

func randomKeys(rng *rand.Rand, n int, limit uint64) []uint64 {
	set := make(map[uint64]bool, n)
	for len(set) < n {
		set[rng.Uint64N(limit)] = true
	}
	keys := make([]uint64, 0, n)
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

type stored struct {
	key   uint64
	val   []float32
	state [][]float32
}

// dump returns everything tb holds, by key, as Range reports it.
func dump(tb *store.Table) []stored {
	var out []stored
	tb.Range(0, math.MaxUint64, func(key uint64, val []float32, state [][]float32) bool {
		s := stored{key: key, val: slices.Clone(val)}
		for _, p := range state {
			s.state = append(s.state, slices.Clone(p))
		}
		out = append(out, s)
		return true
	})
	return out
}

// rangeSrc is the src a server passes to WriteTable: its table's keys in
// [lo,hi).
func rangeSrc(tb *store.Table, lo, hi uint64) func(func(uint64, []float32, [][]float32) bool) {
	return func(fn func(uint64, []float32, [][]float32) bool) { tb.Range(lo, hi, fn) }
}

// restore loads the named files of c into a fresh table of spec.
func restore(t testing.TB, c *Checkpoint, spec table.Spec, names ...string) *store.Table {
	t.Helper()
	tb, _ := newStore(t, spec)
	for _, name := range names {
		fi, ok := c.File(name)
		if !ok {
			t.Fatalf("checkpoint %d has no file %s", c.Seq, name)
		}
		if fi.Spec != spec {
			t.Fatalf("%s: spec %+v, want %+v", name, fi.Spec, spec)
		}
		err := c.ReadTable(context.Background(), name, func(key uint64, val []float32, state [][]float32) error {
			tb.Load(key, val, state)
			return nil
		})
		if err != nil {
			t.Fatalf("ReadTable %s: %v", name, err)
		}
	}
	return tb
}

func sameTables(t *testing.T, what string, got, want *store.Table) {
	t.Helper()
	g, w := dump(got), dump(want)
	if len(w) == 0 && len(g) == 0 {
		return
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s: restored table differs: %d keys, want %d", what, len(g), len(w))
	}
	if got.Stats().Keys != want.Stats().Keys {
		t.Fatalf("%s: restored table has %d keys, want %d", what, got.Stats().Keys, want.Stats().Keys)
	}
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	specs := []table.Spec{
		{Name: "weights", Width: 1},
		{Name: "emb", Width: 8, Rule: table.Rule{Kind: table.Adam}},
		{Name: "ftrl", Width: 3, Rule: table.Rule{Kind: table.FTRL, L1: 0.1}},
		{Name: "ada", Width: 17, Rule: table.Rule{Kind: table.AdaGrad}, Init: table.Init{Kind: table.Normal, Scale: 0.1, Seed: 7}},
		{Name: "empty", Width: 2, Rule: table.Rule{Kind: table.SGD}},
	}
	tables := make([]*store.Table, len(specs))
	for i, spec := range specs {
		tables[i], specs[i] = newStore(t, spec)
		switch spec.Name {
		case "weights":
			fill(tables[i], spec.Width, randomKeys(rng, 1000, 2000), rng) // dense
		case "empty":
		default:
			fill(tables[i], spec.Width, randomKeys(rng, 500, 1<<62), rng)
		}
	}

	root := t.TempDir()
	w, err := Create(root, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Two servers, each writing the keys below or above a split point, at
	// the same time.
	const split = 1 << 61
	servers := [][2]uint64{{0, split}, {split, math.MaxUint64}}
	var wg sync.WaitGroup
	errs := make(chan error, len(servers)*len(specs))
	for s, r := range servers {
		wg.Go(func() {
			for i, spec := range specs {
				name := fmt.Sprintf("server-%d.%s", s, spec.Name)
				if _, err := w.WriteTable(context.Background(), name, spec, rangeSrc(tables[i], r[0], r[1])); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	meta := Meta{
		Epoch:      3,
		Clocks:     map[string]int64{"worker-0": 12, "worker-1": 11},
		Pass:       4,
		Partitions: map[int]PartitionProgress{0: {Passes: 1, Offset: 250}, 7: {Passes: 2, Offset: 0}},
		Extra:      json.RawMessage(`{"app":"lr","lr":0.5}`),
	}
	committed, err := w.Commit(meta)
	if err != nil {
		t.Fatal(err)
	}

	c, skipped, err := Latest(context.Background(), root)
	if err != nil || len(skipped) != 0 {
		t.Fatalf("Latest: %v, skipped %v", err, skipped)
	}
	if c.Seq != 1 || c.Dir != filepath.Join(root, "ckpt-0000000001") || !c.Created.Equal(committed.Created) {
		t.Fatalf("Latest = seq %d dir %s created %v; committed %v", c.Seq, c.Dir, c.Created, committed.Created)
	}
	if !reflect.DeepEqual(c.Files, committed.Files) || len(c.Files) != len(servers)*len(specs) {
		t.Fatalf("files %+v\nwant %+v", c.Files, committed.Files)
	}
	if c.Meta.Epoch != meta.Epoch || c.Meta.Pass != meta.Pass || !reflect.DeepEqual(c.Meta.Clocks, meta.Clocks) || !reflect.DeepEqual(c.Meta.Partitions, meta.Partitions) {
		t.Fatalf("meta %+v, want %+v", c.Meta, meta)
	}
	var extra map[string]any
	if err := json.Unmarshal(c.Meta.Extra, &extra); err != nil || extra["app"] != "lr" || extra["lr"] != 0.5 {
		t.Fatalf("extra %s: %v", c.Meta.Extra, err)
	}

	for i, spec := range specs {
		names := []string{"server-0." + spec.Name, "server-1." + spec.Name}
		var records int64
		for _, n := range names {
			fi, _ := c.File(n)
			records += fi.Records
			if fi.Table != spec.Name {
				t.Fatalf("%s: table %q, want %q", n, fi.Table, spec.Name)
			}
		}
		if want := tables[i].Stats().Keys; records != want {
			t.Fatalf("%s: %d records, want %d", spec.Name, records, want)
		}
		sameTables(t, spec.Name, restore(t, c, spec, names...), tables[i])
	}
}

func Test100kKeys(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tb, spec := newStore(t, table.Spec{Name: "big", Width: 4, Rule: table.Rule{Kind: table.Adam}})
	fill(tb, spec.Width, randomKeys(rng, 100_000, 1<<40), rng)
	root := t.TempDir()
	w, err := Create(root, 1)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := w.WriteTable(context.Background(), "server-0.big", spec, rangeSrc(tb, 0, math.MaxUint64))
	if err != nil {
		t.Fatal(err)
	}
	// 72-byte records: the file must span several blocks for this test to
	// exercise block boundaries.
	if fi.Records != 100_000 || fi.Size < 5*blockTarget {
		t.Fatalf("file: %+v", fi)
	}
	if _, err := w.Commit(Meta{}); err != nil {
		t.Fatal(err)
	}
	c, _, err := Latest(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	sameTables(t, "big", restore(t, c, spec, "server-0.big"), tb)
}

// TestFormat decodes a data file with the offsets that
// docs/format/checkpoint.md gives, independently of the reader.
func TestFormat(t *testing.T) {
	spec := table.Spec{Name: "f", Width: 2, Rule: table.Rule{Kind: table.FTRL}}
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	const n = 100_000 // 8+4*2*3 = 32-byte records: 32768 a block, 4 blocks
	w, err := Create(t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := w.WriteTable(context.Background(), "f", spec, func(fn func(uint64, []float32, [][]float32) bool) {
		for k := range uint64(n) {
			x := float32(k)
			if !fn(k*3, []float32{x, -x}, [][]float32{{x + 1, x + 2}, {x + 3, x + 4}}) {
				return
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(w.Dir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	if int64(len(b)) != fi.Size || crc(b) != fi.CRC {
		t.Fatalf("size %d crc %08x, FileInfo %+v", len(b), crc(b), fi)
	}
	hlen := int(le.Uint32(b[8:]))
	if string(b[:4]) != "TRCK" || le.Uint16(b[4:]) != 1 || le.Uint16(b[6:]) != 0 || le.Uint32(b[12:]) != 2 || le.Uint32(b[16:]) != 2 {
		t.Fatalf("header % x", b[:24])
	}
	var hs table.Spec
	if err := json.Unmarshal(b[24:hlen-4], &hs); err != nil || hs != spec {
		t.Fatalf("header spec %+v: %v", hs, err)
	}
	if le.Uint32(b[hlen-4:]) != crc(b[:hlen-4]) {
		t.Fatal("header CRC")
	}
	chain := crcOfU32(nil, le.Uint32(b[hlen-4:]))
	off, blocks, next := hlen, 0, uint64(0)
	for string(b[off:off+4]) == "TBLK" {
		count, plen := int(le.Uint32(b[off+4:])), int(le.Uint32(b[off+8:]))
		if plen != count*32 || count != min(blockTarget/32, n-int(next)) {
			t.Fatalf("block %d: %d records, %d bytes", blocks, count, plen)
		}
		if want := crc(append(slices.Clone(b[off:off+12]), b[off+16:off+16+plen]...)); le.Uint32(b[off+12:]) != want {
			t.Fatalf("block %d CRC", blocks)
		}
		chain = crcOfU32(chain, le.Uint32(b[off+12:]))
		for r := range count {
			rec := b[off+16+32*r:]
			x := float32(next)
			want := []float32{x, -x, x + 1, x + 2, x + 3, x + 4}
			if le.Uint64(rec) != next*3 {
				t.Fatalf("record %d key %d", next, le.Uint64(rec))
			}
			for i, v := range want {
				if math.Float32frombits(le.Uint32(rec[8+4*i:])) != v {
					t.Fatalf("record %d float %d", next, i)
				}
			}
			next++
		}
		off += 16 + plen
		blocks++
	}
	tr := b[off:]
	if len(tr) != 32 || string(tr[:4]) != "TEND" || le.Uint32(tr[4:]) != 0 || le.Uint64(tr[8:]) != uint64(blocks) ||
		le.Uint64(tr[16:]) != n || next != n || le.Uint32(tr[24:]) != crc(chain) || le.Uint32(tr[28:]) != crc(tr[:28]) {
		t.Fatalf("trailer % x after %d blocks, %d records", tr, blocks, next)
	}
	if blocks != 4 {
		t.Fatalf("%d blocks, want 4", blocks)
	}
}

func crc(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }

func crcOfU32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }

func TestNoManifestIsIncomplete(t *testing.T) {
	root := t.TempDir()
	tb, spec := newStore(t, table.Spec{Name: "w", Width: 1})
	fill(tb, 1, randomKeys(rand.New(rand.NewPCG(5, 6)), 100, 1000), rand.New(rand.NewPCG(7, 8)))
	write := func(seq uint64, commit bool) {
		t.Helper()
		w, err := Create(root, seq)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteTable(context.Background(), "server-0.w", spec, rangeSrc(tb, 0, math.MaxUint64)); err != nil {
			t.Fatal(err)
		}
		if commit {
			if _, err := w.Commit(Meta{Epoch: seq}); err != nil {
				t.Fatal(err)
			}
		}
		// Otherwise: the process died after the data files were durable
		// and before the MANIFEST.
	}

	write(1, false)
	c, skipped, err := Latest(context.Background(), root)
	if !errors.Is(err, ErrNoCheckpoint) || c != nil || len(skipped) != 1 || !errors.Is(skipped[0], ErrIncomplete) {
		t.Fatalf("Latest = %v, %v, %v; want ErrNoCheckpoint after skipping an incomplete one", c, skipped, err)
	}

	write(2, true)
	write(3, false)
	// A crash inside WriteTable leaves a temporary file behind.
	if err := os.WriteFile(filepath.Join(root, dirName(3), ".server-1.w.tmp"), []byte("TRCK"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, skipped, err = Latest(context.Background(), root)
	if err != nil || c.Seq != 2 || c.Meta.Epoch != 2 || len(skipped) != 1 || !errors.Is(skipped[0], ErrIncomplete) ||
		!strings.Contains(skipped[0].Error(), "checkpoint 3") {
		t.Fatalf("Latest = %+v, %v, %v; want checkpoint 2, skipping 3 as incomplete", c, skipped, err)
	}
	sameTables(t, "w", restore(t, c, spec, "server-0.w"), tb)

	if _, _, err := Latest(context.Background(), filepath.Join(root, "nonexistent")); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("Latest of a missing dir: %v", err)
	}
}

func TestCreateAndAbort(t *testing.T) {
	root := t.TempDir()
	if seq, err := NextSeq(root); err != nil || seq != 1 {
		t.Fatalf("NextSeq of an empty dir = %d, %v", seq, err)
	}
	w, err := Create(root, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, seq := range []uint64{5, 4} {
		if _, err := Create(root, seq); err == nil {
			t.Fatalf("Create(%d) after 5 succeeded", seq)
		}
	}
	if seq, err := NextSeq(root); err != nil || seq != 6 {
		t.Fatalf("NextSeq = %d, %v; want 6", seq, err)
	}
	spec := table.Spec{Name: "t", Width: 1}
	empty := func(func(uint64, []float32, [][]float32) bool) {}
	for _, name := range []string{"", "MANIFEST", ".hidden", "a/b", "..", `a\b`} {
		if _, err := w.WriteTable(context.Background(), name, spec, empty); err == nil {
			t.Errorf("WriteTable(%q) succeeded", name)
		}
	}
	if _, err := w.WriteTable(context.Background(), "t", table.Spec{Name: "t"}, empty); !errors.Is(err, table.ErrInvalid) {
		t.Errorf("WriteTable of a width-0 spec: %v", err)
	}
	if _, err := w.WriteTable(context.Background(), "t", spec, empty); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteTable(context.Background(), "t", spec, empty); err == nil {
		t.Error("a second WriteTable of one name succeeded")
	}
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, dirName(5))); !os.IsNotExist(err) {
		t.Fatalf("aborted checkpoint still there: %v", err)
	}
	if _, err := w.Commit(Meta{}); err == nil {
		t.Fatal("Commit after Abort succeeded")
	}

	w, err = Create(root, 6)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(Meta{}); err != nil {
		t.Fatal(err)
	}
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteTable(context.Background(), "late", spec, empty); err == nil {
		t.Fatal("WriteTable after Commit succeeded")
	}
	c, _, err := Latest(context.Background(), root)
	if err != nil || c.Seq != 6 || len(c.Files) != 0 {
		t.Fatalf("Abort after Commit removed the checkpoint: %+v, %v", c, err)
	}
}

func TestWriteTableErrorsLeaveNothing(t *testing.T) {
	spec := table.Spec{Name: "t", Width: 2}
	ctx, cancel := context.WithCancel(context.Background())
	cases := map[string]struct {
		ctx     context.Context
		src     func(func(uint64, []float32, [][]float32) bool)
		wantErr error
	}{
		"cancelled": {ctx, func(fn func(uint64, []float32, [][]float32) bool) {
			for k := uint64(0); fn(k, []float32{1, 2}, nil); k++ {
				if k == 200_000 {
					cancel()
				}
			}
		}, context.Canceled},
		"wrong_width": {context.Background(), func(fn func(uint64, []float32, [][]float32) bool) {
			fn(1, []float32{1, 2}, nil)
			if fn(2, []float32{1}, nil) {
				panic("WriteTable accepted a record of the wrong width")
			}
		}, nil},
		"extra_state": {context.Background(), func(fn func(uint64, []float32, [][]float32) bool) {
			fn(1, []float32{1, 2}, [][]float32{{0, 0}})
		}, nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w, err := Create(t.TempDir(), 1)
			if err != nil {
				t.Fatal(err)
			}
			_, err = w.WriteTable(tc.ctx, "t", spec, tc.src)
			if err == nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("WriteTable: %v, want %v", err, tc.wantErr)
			}
			ents, _ := os.ReadDir(w.Dir())
			if len(ents) != 0 {
				t.Fatalf("left behind %v", ents)
			}
			// The name is free again.
			if _, err := w.WriteTable(context.Background(), "t", spec, func(func(uint64, []float32, [][]float32) bool) {}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestPrune(t *testing.T) {
	root := t.TempDir()
	spec := table.Spec{Name: "t", Width: 1}
	src := func(fn func(uint64, []float32, [][]float32) bool) {
		for k := range uint64(1000) {
			fn(k, []float32{float32(k)}, nil)
		}
	}
	// state: c complete, i incomplete (no MANIFEST), x corrupt data.
	build := func(t *testing.T, states string) {
		for i, s := range states {
			w, err := Create(root, uint64(i+1))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.WriteTable(context.Background(), "t", spec, src); err != nil {
				t.Fatal(err)
			}
			if s == 'i' {
				continue
			}
			if _, err := w.Commit(Meta{}); err != nil {
				t.Fatal(err)
			}
			if s == 'x' {
				flip(t, filepath.Join(w.Dir(), "t"), 100)
			}
		}
	}
	left := func() string {
		seqs, err := list(root)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(seqs)
	}
	cases := []struct {
		name   string
		states string
		keep   int
		want   string
	}{
		{"keep_newest_two", "ccicccii", 2, "[5 6 7 8]"},
		{"keep_one", "cicic", 1, "[5]"},
		{"incomplete_newer_than_newest_complete_stays", "ccxi", 1, "[2 3 4]"},
		{"fewer_than_keep", "icic", 5, "[2 4]"},
		{"none_complete", "iix", 1, "[1 2 3]"},
		{"corrupt_between", "cxcc", 3, "[1 3 4]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root = t.TempDir()
			build(t, tc.states)
			if err := Prune(context.Background(), root, tc.keep); err != nil {
				t.Fatal(err)
			}
			if got := left(); got != tc.want {
				t.Fatalf("after Prune(%d) of %s: %s, want %s", tc.keep, tc.states, got, tc.want)
			}
			// Whatever was complete and newest still is.
			if strings.Contains(tc.states, "c") {
				c, _, err := Latest(context.Background(), root)
				if err != nil || c.Seq != uint64(strings.LastIndex(tc.states, "c")+1) {
					t.Fatalf("Latest after Prune: %+v, %v", c, err)
				}
			}
		})
	}
	if err := Prune(context.Background(), root, 0); err == nil {
		t.Fatal("Prune(0) succeeded")
	}
}

// flip inverts one bit of the byte at off of path.
func flip(t testing.TB, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x10
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
