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
// leader never sees its state overwritten by an old one. With p set the
// same transaction writes the placement: the save begins a new
// configuration epoch, and PutSnapshot returns it (the transaction's
// revision, which is the placement's ModRevision); otherwise it returns 0.
func (s *Store) PutSnapshot(ctx context.Context, lead *Leadership, blob []byte, p *Placement) (uint64, error) {
	if len(blob) > MaxSnapshotBytes {
		return 0, fmt.Errorf("%w: snapshot of %d bytes, limit %d", ErrInvalid, len(blob), MaxSnapshotBytes)
	}
	ops := []clientv3.Op{clientv3.OpPut(s.snapshotKey(), string(blob))}
	if p != nil {
		op, err := s.placementOp(*p)
		if err != nil {
			return 0, fmt.Errorf("meta: put snapshot: %w", err)
		}
		ops = append(ops, op)
	}
	// A proposal that reached an etcd leader which then died is dropped,
	// and its request waits out its whole deadline; the members elect a new
	// leader within about one election timeout. So each attempt gets a
	// short deadline, and a timed-out one is tried again (the puts are
	// idempotent; if the first attempt did commit, the epoch is the second
	// one's revision, which the placement then carries) until ctx runs out.
	resp, err := s.retryGuarded(ctx, lead, ops...)
	if err != nil {
		return 0, fmt.Errorf("meta: put snapshot: %w", err)
	}
	if p == nil {
		return 0, nil
	}
	return uint64(resp.Header.Revision), nil
}

// putAttempt bounds one attempt of a write (see PutSnapshot): two election
// timeouts of the embedded members, by which a new etcd leader is usually
// elected. The coordinator holds its lock through the write, so this is
// what an etcd leader's death costs it (it was 4 election timeouts; the
// drill's longest stall after SIGKILL of a coordinator whose etcd member
// led etcd was 2.0–2.6 s).
const putAttempt = 2 * DefaultElectionMs * time.Millisecond

// Saved is the coordinator state a leader saved last.
type Saved struct {
	State []byte
	// Epoch is the current configuration epoch: the placement's
	// ModRevision, 0 before the first.
	Epoch uint64
	// Rev is the revision of the state's last save.
	Rev int64
}

// Snapshot returns the last saved coordinator state with the epoch, read
// together, or ErrNotFound.
func (s *Store) Snapshot(ctx context.Context) (Saved, error) {
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.snapshotKey()), clientv3.OpGet(s.placementKey())).Commit()
	if err != nil {
		return Saved{}, fmt.Errorf("meta: snapshot: %w", err)
	}
	state, placement := resp.Responses[0].GetResponseRange(), resp.Responses[1].GetResponseRange()
	if len(state.Kvs) == 0 {
		return Saved{}, fmt.Errorf("meta: snapshot: %w", ErrNotFound)
	}
	sv := Saved{State: state.Kvs[0].Value, Rev: state.Kvs[0].ModRevision}
	if len(placement.Kvs) > 0 {
		sv.Epoch = uint64(placement.Kvs[0].ModRevision)
	}
	return sv, nil
}

// ForgetState deletes the last saved coordinator state, the placement and
// every partition state, only while lead is current, leaving etcd as a
// new cluster finds it (the event timeline and the members' registrations
// stay): what a coordinator does when it resumes from a checkpoint
// because every server of the saved state is gone. A coordinator that
// dies after it keeps to the decision: it finds no saved state, and
// resumes.
func (s *Store) ForgetState(ctx context.Context, lead *Leadership) error {
	_, err := s.retryGuarded(ctx, lead, clientv3.OpDelete(s.snapshotKey()), clientv3.OpDelete(s.placementKey()),
		clientv3.OpDelete(s.pstateKey(), clientv3.WithPrefix()))
	if err != nil {
		return fmt.Errorf("meta: forget state: %w", err)
	}
	return nil
}
