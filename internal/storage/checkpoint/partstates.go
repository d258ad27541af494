package checkpoint

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"github.com/terrace-ml/terrace/internal/crc32c"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

// A cluster checkpoint's partition states (the state workers keep per data
// partition, docs/design/partstate.md) are one file the coordinator writes
// before the commit record, which names it with its size and CRC32C
// (docs/format/checkpoint.md):
//
//	"TPST" 1                        magic, format version
//	uvarint n                       number of partitions with state
//	n × (uvarint partition, uvarint length, length bytes)   ascending partition
//	uint32 CRC32C of everything before it

// StateFile names a partition-state file and what it must hold.
type StateFile struct {
	Name  string `json:"name"`
	Size  int64  `json:"size"`
	CRC32 uint32 `json:"crc32c"`
}

var stateMagic = []byte("TPST\x01")

// statePrefix begins a partition-state file's name.
const statePrefix = "partstate-"

func stateName(seq uint64) string { return fmt.Sprintf("%s%010d", statePrefix, seq) }

// WritePartStates durably writes the partition states of cluster
// checkpoint seq into dir and returns what its commit record must name.
func WritePartStates(dir string, seq uint64, states map[int][]byte) (StateFile, error) {
	b := slices.Clone(stateMagic)
	b = binary.AppendUvarint(b, uint64(len(states)))
	for _, p := range slices.Sorted(maps.Keys(states)) {
		b = binary.AppendUvarint(b, uint64(p))
		b = binary.AppendUvarint(b, uint64(len(states[p])))
		b = append(b, states[p]...)
	}
	b = binary.LittleEndian.AppendUint32(b, crc32c.Checksum(b))
	f := StateFile{Name: stateName(seq), Size: int64(len(b)), CRC32: crc32c.Checksum(b)}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return StateFile{}, fmt.Errorf("checkpoint: %w", err)
	}
	if err := writeDurably(dir, f.Name, b); err != nil {
		return StateFile{}, fmt.Errorf("checkpoint: partition states %d: %w", seq, err)
	}
	return f, nil
}

// ReadPartStates reads the partition-state file f under dir, refusing it
// (ErrCorrupt) unless it is exactly what the commit record says.
func ReadPartStates(dir string, f StateFile) (map[int][]byte, error) {
	path := filepath.Join(dir, filepath.Base(f.Name))
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: partition states: %w", err)
	}
	bad := func(off int, why string, args ...any) error {
		return &CorruptError{Path: path, Offset: int64(off), Reason: fmt.Sprintf(why, args...)}
	}
	if int64(len(b)) != f.Size || crc32c.Checksum(b) != f.CRC32 {
		return nil, bad(0, "%d bytes with CRC32C %#x; the commit record says %d bytes, %#x", len(b), crc32c.Checksum(b), f.Size, f.CRC32)
	}
	if len(b) < len(stateMagic)+4 || !bytes.Equal(b[:len(stateMagic)], stateMagic) {
		return nil, bad(0, "not a partition-state file of format 1")
	}
	body := b[:len(b)-4]
	if crc32c.Checksum(body) != binary.LittleEndian.Uint32(b[len(body):]) {
		return nil, bad(len(body), "trailing checksum mismatch")
	}
	off := len(stateMagic)
	next := func() (uint64, bool) {
		v, k := binary.Uvarint(body[off:])
		if k <= 0 {
			return 0, false
		}
		off += k
		return v, true
	}
	n, ok := next()
	if !ok {
		return nil, bad(off, "bad partition count")
	}
	out := make(map[int][]byte, min(n, 1<<16))
	for range n {
		at := off
		p, ok1 := next()
		size, ok2 := next()
		if !ok1 || !ok2 || size > uint64(len(body)-off) || p > 1<<31 {
			return nil, bad(at, "bad partition entry")
		}
		out[int(p)] = slices.Clone(body[off : off+int(size)])
		off += int(size)
	}
	if off != len(body) {
		return nil, bad(off, "%d bytes after the last partition", len(body)-off)
	}
	return out, nil
}
