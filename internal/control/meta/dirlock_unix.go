//go:build unix

package meta

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"go.etcd.io/etcd/server/v3/storage/datadir"
)

// checkDirFree refuses a data directory whose etcd database another
// process holds open: etcd waits for bbolt's lock on it for good, and the
// member never starts (a second coordinator on a running one's --etcd-dir
// hung, silent, and ignored SIGTERM). It takes the lock bbolt takes,
// without waiting, and lets it go at once.
func checkDirFree(dir string) error {
	db := datadir.ToBackendFileName(dir)
	f, err := os.Open(db)
	if errors.Is(err, os.ErrNotExist) {
		return nil // a new member's directory
	}
	if err != nil {
		return fmt.Errorf("meta: embedded etcd: %w", err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return fmt.Errorf("meta: embedded etcd: %w: %s (its database is locked by another process: a coordinator running on the same --etcd-dir?)", ErrDirInUse, dir)
	}
	if err != nil {
		return fmt.Errorf("meta: embedded etcd: lock %s: %w", db, err)
	}
	return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}
