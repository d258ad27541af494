package meta

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// MaxSnapshotBytes bounds a coordinator snapshot (etcd's default request
// limit is 1.5 MiB).
const MaxSnapshotBytes = 1 << 20

func (s *Store) snapshotKey() string { return s.key("coordinator-state") }

// PutSnapshot saves the coordinator's whole state, only while lead is
// current: a deposed leader's late save fails with ErrNotLeader, so a new
// leader never sees its state overwritten by an old one.
func (s *Store) PutSnapshot(ctx context.Context, lead *Leadership, blob []byte) error {
	if len(blob) > MaxSnapshotBytes {
		return fmt.Errorf("%w: snapshot of %d bytes, limit %d", ErrInvalid, len(blob), MaxSnapshotBytes)
	}
	// A proposal that reached an etcd leader which then died is dropped,
	// and its request waits out its whole deadline; the members elect a new
	// leader within about one election timeout. So each attempt gets a
	// short deadline, and a timed-out one is tried again (the put is
	// idempotent) until ctx runs out.
	if err := s.retryGuarded(ctx, lead, clientv3.OpPut(s.snapshotKey(), string(blob))); err != nil {
		return fmt.Errorf("meta: put snapshot: %w", err)
	}
	return nil
}

// putAttempt bounds one attempt of a write (see PutSnapshot): a few
// election timeouts of the embedded members.
const putAttempt = 4 * DefaultElectionMs * time.Millisecond

// Snapshot returns the last saved coordinator state, or ErrNotFound.
func (s *Store) Snapshot(ctx context.Context) ([]byte, error) {
	resp, err := s.cli.Get(ctx, s.snapshotKey())
	if err != nil {
		return nil, fmt.Errorf("meta: snapshot: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("meta: snapshot: %w", ErrNotFound)
	}
	return resp.Kvs[0].Value, nil
}
