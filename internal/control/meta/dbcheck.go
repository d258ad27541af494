package meta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/server/v3/storage/datadir"
)

// checkEnv, set to a database's path, makes a process that imports this
// package check that database and exit (checkInChild).
const checkEnv = "TERRACE_META_CHECK_DB"

func init() {
	if db := os.Getenv(checkEnv); db != "" {
		os.Exit(checkInChild(db))
	}
}

// checkDB refuses a data directory whose etcd database is damaged, before
// etcd opens it: etcd panicked in goroutines of its own on a damaged file
// ("failed to open database" on a truncated or overwritten one; a slice
// out of range as it read the keys of a damaged page of one that opens),
// which ended the coordinator with a goroutine dump and exit 2 instead of
// an error naming the directory. A new member's directory (no database
// yet) passes.
//
// bbolt's consistency check walks every page the database reaches and
// reads every key, but a damaged page can make it panic in a goroutine of
// bbolt's own (where it rebuilds the free list of a database, as etcd's,
// that does not save one), which no recover reaches. So the check runs in
// a child process, this program started again with checkEnv set: its
// crash is the verdict, and its message goes into the error. Where the
// program cannot be started again, the database is only opened here.
func checkDB(dir string) error {
	db := datadir.ToBackendFileName(dir)
	if _, err := os.Stat(db); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	damaged := func(why any) error {
		return fmt.Errorf("meta: %w: %s: its database %s is damaged (%v): restore the directory from a backup, or move it aside to start a new member (the cluster's state in it is then lost)", ErrDataDamaged, dir, db, why)
	}
	exe, err := os.Executable()
	if err != nil {
		return openDB(db, damaged)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), checkEnv+"="+db)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) || ctx.Err() != nil {
			return openDB(db, damaged) // not started, or stuck: check what can be checked here
		}
		return damaged(firstLine(out.String(), err))
	}
	return nil
}

// openDB is the check where no child can run: the database must open.
func openDB(db string, damaged func(any) error) (err error) {
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

// checkInChild opens db read-only and runs bbolt's consistency check on it,
// printing the first fault; it returns the exit status. A panic on the way
// ends the process, which checkDB reads as the same verdict.
func checkInChild(db string) int {
	b, err := bolt.Open(db, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer b.Close()
	err = b.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			return err
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// firstLine is the first line of a child's output (a panic's message, or
// the check's first fault), or err where it printed nothing.
func firstLine(out string, err error) string {
	if line, _, _ := strings.Cut(strings.TrimSpace(out), "\n"); line != "" {
		return line
	}
	return err.Error()
}
