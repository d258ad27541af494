package meta

import (
	"errors"
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/server/v3/storage/datadir"
)

// checkDB refuses a data directory whose etcd database does not open: a
// truncated or overwritten file made etcd panic in a goroutine of its own
// ("failed to open database"), which ended the coordinator with a
// goroutine dump and exit 2 instead of an error naming the directory. It
// opens the database read-only, as etcd would, and closes it at once; a
// panic of bbolt's on a damaged file is taken as the same damage. A new
// member's directory (no database yet) passes.
func checkDB(dir string) (err error) {
	db := datadir.ToBackendFileName(dir)
	if _, err := os.Stat(db); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	damaged := func(why any) error {
		return fmt.Errorf("meta: embedded etcd: %w: %s: its database %s does not open (%v): restore the directory from a backup, or move it aside to start a new member (the cluster's state in it is then lost)", ErrDataDamaged, dir, db, why)
	}
	defer func() {
		if p := recover(); p != nil {
			err = damaged(p)
		}
	}()
	b, err := bolt.Open(db, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return damaged(err)
	}
	return b.Close()
}
