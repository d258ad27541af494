package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

const dirPrefix = "ckpt-"

// dirName is a checkpoint's directory: zero-padded so that names sort as
// numbers do in a listing.
func dirName(seq uint64) string { return fmt.Sprintf("%s%010d", dirPrefix, seq) }

// list returns the sequence numbers of dir's checkpoint directories,
// complete or not, in increasing order. Other entries are ignored.
func list(dir string) ([]uint64, error) {
	seqs, err := numbered(dir, dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list %s: %w", dir, err)
	}
	return seqs, nil
}

// numbered returns, in increasing order, the numbers of dir's entries
// named prefix followed by a zero-padded sequence number.
func numbered(dir, prefix string) ([]uint64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var seqs []uint64
	for _, e := range entries {
		if digits, ok := strings.CutPrefix(e.Name(), prefix); ok {
			if n, err := strconv.ParseUint(digits, 10, 64); err == nil && fmt.Sprintf("%s%010d", prefix, n) == e.Name() {
				seqs = append(seqs, n)
			}
		}
	}
	slices.Sort(seqs)
	return seqs, nil
}

// Latest returns the newest complete checkpoint in dir, verifying every
// byte of its data files against the manifest. Newer checkpoints that are
// incomplete (ErrIncomplete) or corrupt (ErrCorrupt) are passed over, and
// skipped says why, newest first. With no complete checkpoint the error is
// ErrNoCheckpoint.
func Latest(ctx context.Context, dir string) (c *Checkpoint, skipped []error, err error) {
	seqs, err := list(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("%w in %s: %w", ErrNoCheckpoint, dir, err)
	}
	if err != nil {
		return nil, nil, err
	}
	for _, seq := range slices.Backward(seqs) {
		c, err := open(ctx, dir, seq)
		if err == nil {
			return c, skipped, nil
		}
		if ctx.Err() != nil {
			return nil, skipped, ctx.Err()
		}
		skipped = append(skipped, fmt.Errorf("checkpoint %d skipped: %w", seq, err))
	}
	return nil, skipped, fmt.Errorf("%w in %s", ErrNoCheckpoint, dir)
}

// Prune keeps the newest keep complete checkpoints of dir and removes the
// older ones, as well as any incomplete or corrupt checkpoint older than
// the newest complete one. Newer incomplete ones stay: one may still be
// being written. Finding which are complete reads them as Latest does,
// until keep complete ones are found.
func Prune(ctx context.Context, dir string, keep int) error {
	if keep < 1 {
		return fmt.Errorf("checkpoint: prune %s: keep %d; want at least 1", dir, keep)
	}
	seqs, err := list(dir)
	if err != nil {
		return err
	}
	var errs []error
	complete := 0
	for _, seq := range slices.Backward(seqs) {
		if complete < keep {
			_, err := open(ctx, dir, seq)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err == nil {
				complete++
				continue
			}
			if complete == 0 {
				continue
			}
		}
		if err := remove(filepath.Join(dir, dirName(seq))); err != nil {
			errs = append(errs, err)
		}
	}
	if err := syncDir(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// remove deletes a checkpoint directory, its MANIFEST first, so that a
// crash part way leaves an incomplete checkpoint rather than one that
// lists missing files.
func remove(path string) error {
	err := os.Remove(filepath.Join(path, manifestName))
	if err == nil {
		err = syncDir(path)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checkpoint: prune: %w", err)
	}
	if err := os.RemoveAll(path); err != nil {
		return fmt.Errorf("checkpoint: prune: %w", err)
	}
	return nil
}
