package checkpoint

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/terrace-ml/terrace/table"
)

// Corruption tests: checkpoint 1 and 2 are written alike, then one file of
// checkpoint 2 is damaged. Latest must fall back to checkpoint 1 and say
// why, and ReadTable of the damaged data file must fail with ErrCorrupt at
// the place the damage is.
func TestCorruption(t *testing.T) {
	// Width-1 sum records are 12 bytes: 87381 to a block, so 200k records
	// make blocks 0 and 1 full and block 2 partial.
	spec := table.Spec{Name: "w", Width: 1}
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	const (
		records  = 200_000
		perBlock = blockTarget / 12
		block    = blockHeader + perBlock*12 // bytes of a full block
	)
	src := func(fn func(uint64, []float32, [][]float32) bool) {
		for k := range uint64(records) {
			if !fn(k*5, []float32{float32(k) / 3}, nil) {
				return
			}
		}
	}

	type layout struct{ header, size int64 } // of the data file "big"
	blockAt := func(l layout, i int) int64 { return l.header + int64(i)*block }
	trailerAt := func(l layout) int64 { return l.size - trailerLen }

	cases := []struct {
		name string
		file string // of checkpoint 2, damaged by damage
		// damage changes the file at path; l is the layout of "big".
		damage func(t *testing.T, path string, l layout)
		// skipped is what Latest's reason for passing over checkpoint 2
		// must wrap and contain.
		skipped error
		reason  string
		// readOff is where ReadTable of the file must report corruption;
		// -1 when it cannot be read at all, -2 when the damage is not in a
		// data file.
		readOff func(l layout) int64
	}{
		{
			name:    "torn_last_record",
			file:    "big",
			damage:  func(t *testing.T, p string, l layout) { truncate(t, p, trailerAt(l)-5) },
			skipped: ErrCorrupt, reason: "the manifest says",
			readOff: func(l layout) int64 { return blockAt(l, 2) },
		},
		{
			name:    "torn_mid_file",
			file:    "big",
			damage:  func(t *testing.T, p string, l layout) { truncate(t, p, blockAt(l, 1)+100) },
			skipped: ErrCorrupt, reason: "the manifest says",
			readOff: func(l layout) int64 { return blockAt(l, 1) },
		},
		{
			name:    "torn_before_trailer",
			file:    "big",
			damage:  func(t *testing.T, p string, l layout) { truncate(t, p, trailerAt(l)) },
			skipped: ErrCorrupt, reason: "the manifest says",
			readOff: func(l layout) int64 { return trailerAt(l) },
		},
		{
			name:    "empty_file",
			file:    "big",
			damage:  func(t *testing.T, p string, l layout) { truncate(t, p, 0) },
			skipped: ErrCorrupt, reason: "the manifest says",
			readOff: func(layout) int64 { return 0 },
		},
		{
			name:    "bad_header",
			file:    "big",
			damage:  func(t *testing.T, p string, l layout) { flip(t, p, 1) },
			skipped: ErrCorrupt, reason: "CRC32C",
			readOff: func(layout) int64 { return 0 },
		},
		{
			name:    "bad_header_spec",
			file:    "big",
			damage:  func(t *testing.T, p string, l layout) { flip(t, p, 30) },
			skipped: ErrCorrupt, reason: "CRC32C",
			readOff: func(layout) int64 { return 0 },
		},
		{
			name:    "bit_flip",
			file:    "big",
			damage:  func(t *testing.T, p string, l layout) { flip(t, p, blockAt(l, 1)+blockHeader+5000) },
			skipped: ErrCorrupt, reason: "CRC32C",
			readOff: func(l layout) int64 { return blockAt(l, 1) },
		},
		{
			name:    "bit_flip_last_block",
			file:    "big",
			damage:  func(t *testing.T, p string, l layout) { flip(t, p, trailerAt(l)-1) },
			skipped: ErrCorrupt, reason: "CRC32C",
			readOff: func(l layout) int64 { return blockAt(l, 2) },
		},
		{
			name:    "bad_block_count",
			file:    "big",
			damage:  func(t *testing.T, p string, l layout) { flip(t, p, blockAt(l, 1)+4) },
			skipped: ErrCorrupt, reason: "CRC32C",
			readOff: func(l layout) int64 { return blockAt(l, 1) },
		},
		{
			name:    "bad_trailer",
			file:    "big",
			damage:  func(t *testing.T, p string, l layout) { flip(t, p, trailerAt(l)+16) },
			skipped: ErrCorrupt, reason: "CRC32C",
			readOff: func(l layout) int64 { return trailerAt(l) },
		},
		{
			// Every block is valid on its own; only the trailer's counts
			// show that one is gone.
			name: "missing_block",
			file: "big",
			damage: func(t *testing.T, p string, l layout) {
				edit(t, p, func(b []byte) []byte { return slices.Delete(b, int(blockAt(l, 1)), int(blockAt(l, 2))) })
			},
			skipped: ErrCorrupt, reason: "the manifest says",
			readOff: func(l layout) int64 { return trailerAt(l) - block },
		},
		{
			// Same size, same counts, every block valid: only the CRC of
			// block CRCs catches it.
			name: "swapped_blocks",
			file: "big",
			damage: func(t *testing.T, p string, l layout) {
				edit(t, p, func(b []byte) []byte {
					b0 := slices.Clone(b[blockAt(l, 0):blockAt(l, 1)])
					copy(b[blockAt(l, 0):], b[blockAt(l, 1):blockAt(l, 2)])
					copy(b[blockAt(l, 1):], b0)
					return b
				})
			},
			skipped: ErrCorrupt, reason: "CRC32C",
			readOff: func(l layout) int64 { return trailerAt(l) },
		},
		{
			name: "trailing_garbage",
			file: "big",
			damage: func(t *testing.T, p string, l layout) {
				edit(t, p, func(b []byte) []byte { return append(b, 0) })
			},
			skipped: ErrCorrupt, reason: "the manifest says",
			readOff: func(l layout) int64 { return l.size },
		},
		{
			name:    "missing_file",
			file:    "big",
			damage:  func(t *testing.T, p string, l layout) { rm(t, p) },
			skipped: fs.ErrNotExist, reason: "big",
			readOff: func(layout) int64 { return -1 },
		},
		{
			name:    "missing_small_file",
			file:    "small",
			damage:  func(t *testing.T, p string, l layout) { rm(t, p) },
			skipped: fs.ErrNotExist, reason: "small",
			readOff: func(layout) int64 { return -1 },
		},
		{
			name:    "no_manifest",
			file:    manifestName,
			damage:  func(t *testing.T, p string, l layout) { rm(t, p) },
			skipped: ErrIncomplete, reason: "ckpt-0000000002",
			readOff: func(layout) int64 { return -2 },
		},
		{
			// Still valid JSON, but not what was written.
			name: "bad_manifest",
			file: manifestName,
			damage: func(t *testing.T, p string, l layout) {
				edit(t, p, func(b []byte) []byte {
					return []byte(strings.Replace(string(b), `"epoch": 2`, `"epoch": 3`, 1))
				})
			},
			skipped: ErrCorrupt, reason: "checksum",
			readOff: func(layout) int64 { return -2 },
		},
		{
			name:    "bad_manifest_syntax",
			file:    manifestName,
			damage:  func(t *testing.T, p string, l layout) { flip(t, p, 60) },
			skipped: ErrCorrupt, reason: "MANIFEST",
			readOff: func(layout) int64 { return -2 },
		},
		{
			name: "bad_manifest_crc",
			file: manifestName,
			damage: func(t *testing.T, p string, l layout) {
				edit(t, p, func(b []byte) []byte {
					s := string(b)
					i := strings.Index(s, `"crc32c": `) + len(`"crc32c": `)
					d := "1"
					if s[i] == '1' {
						d = "2"
					}
					return []byte(s[:i] + d + s[i+1:])
				})
			},
			skipped: ErrCorrupt, reason: "checksum",
			readOff: func(layout) int64 { return -2 },
		},
		{
			name:    "torn_manifest",
			file:    manifestName,
			damage:  func(t *testing.T, p string, l layout) { truncate(t, p, 200) },
			skipped: ErrCorrupt, reason: "MANIFEST",
			readOff: func(layout) int64 { return -2 },
		},
		{
			name:    "empty_manifest",
			file:    manifestName,
			damage:  func(t *testing.T, p string, l layout) { truncate(t, p, 0) },
			skipped: ErrCorrupt, reason: "MANIFEST",
			readOff: func(layout) int64 { return -2 },
		},
		{
			name: "manifest_of_another_checkpoint",
			file: manifestName,
			damage: func(t *testing.T, p string, l layout) {
				b, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(p)), dirName(1), manifestName))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, b, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			skipped: ErrCorrupt, reason: "manifest of checkpoint 1",
			readOff: func(layout) int64 { return -2 },
		},
		{
			// A well-formed manifest naming a file outside the checkpoint.
			name: "manifest_escapes_dir",
			file: manifestName,
			damage: func(t *testing.T, p string, l layout) {
				rewriteManifest(t, p, func(c *Checkpoint) { c.Files[0].Name = "../" + dirName(1) + "/big" })
			},
			skipped: ErrCorrupt, reason: "bad file entry",
			readOff: func(layout) int64 { return -2 },
		},
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			var cps []*Checkpoint
			for seq := uint64(1); seq <= 2; seq++ {
				w, err := Create(root, seq)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := w.WriteTable(context.Background(), "big", spec, src); err != nil {
					t.Fatal(err)
				}
				if _, err := w.WriteTable(context.Background(), "small", spec, func(fn func(uint64, []float32, [][]float32) bool) {
					fn(42, []float32{1}, nil)
				}); err != nil {
					t.Fatal(err)
				}
				c, err := w.Commit(Meta{Epoch: seq})
				if err != nil {
					t.Fatal(err)
				}
				cps = append(cps, c)
			}
			big, _ := cps[1].File("big")
			hdr, err := os.ReadFile(filepath.Join(cps[1].Dir, "big"))
			if err != nil {
				t.Fatal(err)
			}
			l := layout{header: int64(hdr[8]) | int64(hdr[9])<<8, size: big.Size}
			if got := l.header + 2*block + blockHeader + (records-2*perBlock)*12 + trailerLen; got != l.size {
				t.Fatalf("layout: header %d, size %d; want size %d", l.header, l.size, got)
			}

			tc.damage(t, filepath.Join(cps[1].Dir, tc.file), l)

			c, skipped, err := Latest(context.Background(), root)
			if err != nil || c.Seq != 1 {
				t.Fatalf("Latest = %+v, %v; want checkpoint 1", c, err)
			}
			if len(skipped) != 1 || !errors.Is(skipped[0], tc.skipped) || !strings.Contains(skipped[0].Error(), tc.reason) ||
				!strings.Contains(skipped[0].Error(), "checkpoint 2") {
				t.Fatalf("skipped %v; want one error wrapping %v and mentioning %q", skipped, tc.skipped, tc.reason)
			}
			if tc.skipped != ErrIncomplete && !errors.Is(skipped[0], ErrCorrupt) {
				t.Fatalf("skipped %v; want ErrCorrupt", skipped)
			}
			// The fallback is whole.
			n := 0
			if err := c.ReadTable(context.Background(), "big", func(uint64, []float32, [][]float32) error { n++; return nil }); err != nil || n != records {
				t.Fatalf("ReadTable of checkpoint 1: %d records, %v", n, err)
			}

			want := tc.readOff(l)
			if want == -2 {
				return
			}
			err = cps[1].ReadTable(context.Background(), tc.file, func(uint64, []float32, [][]float32) error { return nil })
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Join(cps[1].Dir, tc.file)) {
				t.Fatalf("ReadTable of the damaged file: %v; want ErrCorrupt naming it", err)
			}
			if want == -1 {
				return
			}
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Offset != want {
				t.Fatalf("ReadTable of the damaged file: %v; want a CorruptError at offset %d", err, want)
			}
		})
	}
}

// TestSpecMismatch: a data file whose header names another spec than the
// manifest does is not to be loaded as the manifest's table.
func TestSpecMismatch(t *testing.T) {
	w, err := Create(t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	spec := table.Spec{Name: "t", Width: 1, Rule: table.Rule{Kind: table.SGD, LR: 0.1}}
	if _, err := w.WriteTable(context.Background(), "t", spec, func(fn func(uint64, []float32, [][]float32) bool) { fn(1, []float32{1}, nil) }); err != nil {
		t.Fatal(err)
	}
	c, err := w.Commit(Meta{})
	if err != nil {
		t.Fatal(err)
	}
	c.Files[0].Spec.Rule.LR = 0.2
	err = c.ReadTable(context.Background(), "t", func(uint64, []float32, [][]float32) error { return nil })
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Offset != 0 || !strings.Contains(ce.Reason, "spec") {
		t.Fatalf("ReadTable with a different spec: %v", err)
	}
	if err := c.ReadTable(context.Background(), "nope", nil); err == nil {
		t.Fatal("ReadTable of an unlisted file succeeded")
	}
	// fn's error stops the read and comes back.
	c.Files[0].Spec.Rule.LR = 0.1
	stop := errors.New("stop")
	if err := c.ReadTable(context.Background(), "t", func(uint64, []float32, [][]float32) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("ReadTable: %v, want fn's error", err)
	}
}

func truncate(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

func rm(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

func edit(t *testing.T, path string, fn func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, fn(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

// rewriteManifest changes a manifest and writes it back with a valid
// checksum, as a buggy writer would.
func rewriteManifest(t *testing.T, path string, fn func(*Checkpoint)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := decodeManifest(b, filepath.Dir(path), 2)
	if err != nil {
		t.Fatal(err)
	}
	fn(c)
	if b, err = encodeManifest(c); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
