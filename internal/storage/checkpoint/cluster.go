package checkpoint

import (
	"context"
	"encoding/binary"
	"fmt"
	"github.com/terrace-ml/terrace/internal/crc32c"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// A cluster checkpoint is made of one checkpoint per server, each in its
// own directory, and a commit record the coordinator writes once every
// server's is complete: a cluster checkpoint exists iff its commit record
// does. The record is the coordinator's metadata (epochs, tables, the
// servers that wrote), followed by a CRC32C of it.

const commitPrefix = "commit-"

func commitName(seq uint64) string { return fmt.Sprintf("%s%010d", commitPrefix, seq) }

// ServerDir is where server id writes its part of the cluster checkpoints
// under dir.
func ServerDir(dir, id string) string { return filepath.Join(dir, "servers", id) }

// CheckServers reads every byte of the parts servers wrote of cluster
// checkpoint seq under dir, as Open does, and returns the first that is
// missing, incomplete or damaged. A commit record says every part was
// complete when it was written; this says they still are, so that a
// resume passes over a cluster checkpoint a server could not load.
func CheckServers(ctx context.Context, dir string, seq uint64, servers []string) error {
	for _, id := range servers {
		if _, err := open(ctx, ServerDir(dir, id), seq); err != nil {
			return fmt.Errorf("checkpoint %d of server %s: %w", seq, id, err)
		}
	}
	return nil
}

// Open returns checkpoint seq under dir if it is complete (see Latest).
func Open(ctx context.Context, dir string, seq uint64) (*Checkpoint, error) {
	return open(ctx, dir, seq)
}

// CommitCluster durably writes the commit record of cluster checkpoint seq.
func CommitCluster(dir string, seq uint64, meta []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	b := binary.LittleEndian.AppendUint32(append([]byte(nil), meta...), crc32c.Checksum(meta))
	if err := writeDurably(dir, commitName(seq), b); err != nil {
		return fmt.Errorf("checkpoint: commit %d: %w", seq, err)
	}
	return nil
}

// LatestCommit returns the newest intact commit record under dir that
// accept (if not nil) accepts, with the reasons newer ones were passed
// over, or ErrNoCheckpoint. accept checks what the record names besides the
// servers' checkpoints (the partition states).
func LatestCommit(dir string, accept func(seq uint64, meta []byte) error) (seq uint64, meta []byte, skipped []error, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%w: %v", ErrNoCheckpoint, err)
	}
	var seqs []uint64
	for _, e := range entries {
		if s, ok := strings.CutPrefix(e.Name(), commitPrefix); ok {
			if n, err := strconv.ParseUint(s, 10, 64); err == nil {
				seqs = append(seqs, n)
			}
		}
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] > seqs[j] })
	for _, s := range seqs {
		b, err := os.ReadFile(filepath.Join(dir, commitName(s)))
		if err == nil && len(b) >= 4 && crc32c.Checksum(b[:len(b)-4]) == binary.LittleEndian.Uint32(b[len(b)-4:]) {
			if accept == nil {
				return s, b[:len(b)-4], skipped, nil
			}
			if err = accept(s, b[:len(b)-4]); err == nil {
				return s, b[:len(b)-4], skipped, nil
			}
		} else if err == nil {
			err = &CorruptError{Path: filepath.Join(dir, commitName(s)), Reason: "commit record checksum mismatch"}
		}
		skipped = append(skipped, err)
	}
	return 0, nil, skipped, fmt.Errorf("%w under %s", ErrNoCheckpoint, dir)
}
