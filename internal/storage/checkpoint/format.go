package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/terrace-ml/terrace/internal/crc32c"
)

var (
	// ErrCorrupt is wrapped by every error that reports bytes on disk that
	// are not what was written: a checksum, length, magic or count that does
	// not match, a truncated file, or a listed file that is missing.
	ErrCorrupt = errors.New("checkpoint: corrupt")
	// ErrIncomplete is wrapped when a checkpoint directory has no MANIFEST:
	// its writer died, or is still writing, before Commit.
	ErrIncomplete = errors.New("checkpoint: incomplete (no MANIFEST)")
	// ErrNoCheckpoint is returned by Latest when the directory holds no
	// complete checkpoint.
	ErrNoCheckpoint = errors.New("checkpoint: no complete checkpoint")
)

// CorruptError says where in which file a data file stopped making sense.
// It wraps ErrCorrupt.
type CorruptError struct {
	Path   string
	Offset int64 // of the header, block or trailer that failed
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("checkpoint: corrupt data file %s at offset %d: %s", e.Path, e.Offset, e.Reason)
}

func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// The data file format, version 1 (docs/format/checkpoint.md).
const (
	version = 1

	fileMagic    = "TRCK"
	blockTag     = "TBLK"
	trailerMagic = "TEND"

	headerFixed = 24      // magic, version, reserved, header length, width, state slots
	maxHeader   = 1 << 16 // a spec's JSON is a few hundred bytes
	blockHeader = 16      // tag, records, payload length, CRC
	trailerLen  = 32

	// blockTarget is the payload size the writer aims for. A torn write
	// loses at most the block it tore in, and the reader holds one block.
	blockTarget = 1 << 20
	// maxPayload bounds what a reader allocates for one block, whatever a
	// corrupt length field says; the largest record (width MaxWidth, three
	// state slots) is 1 MiB + 8 bytes.
	maxPayload = 16 << 20
)

// recordSize is the bytes of one record: the key and width floats for the
// value and for each state slot.
func recordSize(width, slots int) int { return 8 + 4*width*(1+slots) }

// chainCRC folds one CRC into the running checksum of CRCs that the
// trailer carries. It catches blocks that are whole and valid but missing,
// repeated or out of order, which per-block CRCs cannot see.
func chainCRC(chain, crc uint32) uint32 {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], crc)
	return crc32c.Update(chain, b[:])
}
