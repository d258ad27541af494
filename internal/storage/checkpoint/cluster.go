package checkpoint

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/terrace-ml/terrace/internal/crc32c"
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
// over, or ErrNoCheckpoint. accept checks what the record names: the
// servers' parts (CheckServers) and the partition states.
func LatestCommit(dir string, accept func(seq uint64, meta []byte) error) (seq uint64, meta []byte, skipped []error, err error) {
	seqs, err := numbered(dir, commitPrefix)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%w: %v", ErrNoCheckpoint, err)
	}
	for _, s := range slices.Backward(seqs) {
		b, err := readCommit(dir, s)
		if err == nil {
			if accept == nil {
				return s, b, skipped, nil
			}
			if err = accept(s, b); err == nil {
				return s, b, skipped, nil
			}
		}
		skipped = append(skipped, err)
	}
	return 0, nil, skipped, fmt.Errorf("%w under %s", ErrNoCheckpoint, dir)
}

// NextClusterSeq returns one more than the largest sequence number in use
// under dir: by a commit record, intact or not, by a partition states
// file, or by any server's part, complete or not. A cluster resumed from
// an older checkpoint (the newest torn, damaged, or never committed) must
// number its next checkpoint past all of these: a server refuses to create
// a part under a number it holds (Create).
func NextClusterSeq(dir string) (uint64, error) {
	var top uint64
	for _, prefix := range []string{commitPrefix, statePrefix} {
		seqs, err := numbered(dir, prefix)
		if err != nil {
			return 0, fmt.Errorf("checkpoint: %w", err)
		}
		if len(seqs) > 0 {
			top = max(top, seqs[len(seqs)-1])
		}
	}
	servers, err := os.ReadDir(filepath.Join(dir, "servers"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	for _, e := range servers {
		if !e.IsDir() {
			continue
		}
		next, err := NextSeq(ServerDir(dir, e.Name()))
		if err != nil {
			return 0, err
		}
		top = max(top, next-1)
	}
	if top == math.MaxUint64 {
		return 0, fmt.Errorf("checkpoint: %s: sequence numbers exhausted", dir)
	}
	return top + 1, nil
}

// readCommit returns commit record seq under dir with its CRC checked and
// cut off.
func readCommit(dir string, seq uint64) ([]byte, error) {
	path := filepath.Join(dir, commitName(seq))
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < 4 || crc32c.Checksum(b[:len(b)-4]) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return nil, &CorruptError{Path: path, Reason: "commit record checksum mismatch"}
	}
	return b[:len(b)-4], nil
}

// PruneCluster keeps the cluster checkpoints under dir from the keep-th
// newest intact commit record on (keep >= 1) and removes everything older:
// commit records, partition states and every server's parts, those of
// checkpoints that were abandoned before their commit too. Each goes
// commit record first, so that a crash part way leaves a checkpoint that
// no longer exists rather than one that names missing files. Nothing
// newer than that record is touched: a checkpoint being written has no
// record yet. It returns the sequence numbers whose commit record it
// removed.
//
// Intact here means the record's CRC32C: reading every server's part of
// keep checkpoints at each commit would cost keep reads of the model. A
// resume that finds the newest parts damaged (CheckServers) falls back
// among the keep kept.
func PruneCluster(dir string, keep int) (removed []uint64, err error) {
	if keep < 1 {
		return nil, fmt.Errorf("checkpoint: prune %s: keep %d; want at least 1", dir, keep)
	}
	commits, err := numbered(dir, commitPrefix)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: prune %s: %w", dir, err)
	}
	var floor uint64
	kept := 0
	for _, s := range slices.Backward(commits) {
		if _, err := readCommit(dir, s); err == nil {
			if kept++; kept == keep {
				floor = s
				break
			}
		}
	}
	if kept < keep {
		return nil, nil
	}
	var errs []error
	rm := func(path string) {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("checkpoint: prune: %w", err))
		}
	}
	for _, s := range commits {
		if s < floor {
			rm(filepath.Join(dir, commitName(s)))
			removed = append(removed, s)
		}
	}
	if err := syncDir(dir); err != nil {
		return removed, fmt.Errorf("checkpoint: prune %s: %w", dir, err)
	}
	states, _ := numbered(dir, statePrefix)
	for _, s := range states {
		if s < floor {
			rm(filepath.Join(dir, stateName(s)))
		}
	}
	servers, _ := os.ReadDir(filepath.Join(dir, "servers"))
	for _, e := range servers {
		sd := ServerDir(dir, e.Name())
		parts, _ := list(sd)
		for _, s := range parts {
			if s < floor {
				if err := remove(filepath.Join(sd, dirName(s))); err != nil {
					errs = append(errs, err)
				}
			}
		}
		if err := syncDir(sd); err != nil {
			errs = append(errs, err)
		}
	}
	if err := syncDir(dir); err != nil {
		errs = append(errs, err)
	}
	return removed, errors.Join(errs...)
}
