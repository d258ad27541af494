package meta

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// MaxSnapshotBytes bounds a coordinator snapshot's blob, and each of its
// partition records (etcd's default request limit is 1.5 MiB).
const MaxSnapshotBytes = 1 << 20

// The limits of one transaction: etcd refuses more than 128 operations
// (--max-txn-ops) or 1.5 MiB (--max-request-bytes) by default. A save's
// records within these go with its blob; a rewrite of more is written in
// batches of them (docs/design/control.md, "A save costs what changed").
// The limits below leave room for the guard, the keys and the framing:
// a save's blob (MaxSnapshotBytes) and its records (coord's
// MaxSavePartBytes) fit.
const (
	maxTxnOps   = 120
	maxTxnBytes = 1<<20 + 384<<10
)

func (s *Store) snapshotKey() string { return s.key("coordinator-state") }

// The coordinator's partition records are kept by generation:
// P/coordinator-parts/<gen, 20 digits>/<p>, the generation the blob
// names in P/coordinator-gen.
func (s *Store) genKey() string   { return s.key("coordinator-gen") }
func (s *Store) partsKey() string { return s.key("coordinator-parts") + "/" }

func (s *Store) genPrefix(gen uint64) string { return fmt.Sprintf("%s%020d/", s.partsKey(), gen) }

func (s *Store) partKey(gen uint64, p int) string { return s.genPrefix(gen) + strconv.Itoa(p) }

// Save is one save of the coordinator's state (coord.Save): the blob,
// and the partition records of generation Gen that changed (a nil one
// is deleted); with Rewrite, Parts holds every record of the new
// generation Gen, and every other generation's is deleted.
type Save struct {
	State   []byte
	Gen     uint64
	Parts   map[int][]byte
	Rewrite bool
}

// PutSnapshot saves the coordinator's state, only while lead is
// current: a deposed leader's late save fails with ErrNotLeader, so a new
// leader never sees its state overwritten by an old one. With p set the
// same transaction writes the placement: the save begins a new
// configuration epoch, and PutSnapshot returns it (the transaction's
// revision, which is the placement's ModRevision); otherwise it returns 0.
//
// A save whose records fit in one transaction with its blob is written
// so. A rewrite that does not writes its records first, in batches,
// after deleting whatever a leader that died in the middle of one left
// under its generation, and the blob that names the generation last, in
// one transaction with the deletion of every other generation: a reader
// before that transaction finds the old blob and its old records whole.
func (s *Store) PutSnapshot(ctx context.Context, lead *Leadership, sv Save, p *Placement) (uint64, error) {
	if len(sv.State) > MaxSnapshotBytes {
		return 0, fmt.Errorf("meta: put snapshot: %w: snapshot of %d bytes, limit %d", ErrInvalid, len(sv.State), MaxSnapshotBytes)
	}
	parts := make([]clientv3.Op, 0, len(sv.Parts))
	size := len(sv.State)
	for _, part := range slices.Sorted(maps.Keys(sv.Parts)) {
		b := sv.Parts[part]
		switch {
		case part < 0:
			return 0, fmt.Errorf("meta: put snapshot: %w: negative partition %d", ErrInvalid, part)
		case len(b) > MaxSnapshotBytes:
			return 0, fmt.Errorf("meta: put snapshot: %w: partition %d's record of %d bytes, limit %d", ErrInvalid, part, len(b), MaxSnapshotBytes)
		case b == nil && sv.Rewrite:
			continue // a new generation holds nothing yet
		case b == nil:
			parts = append(parts, clientv3.OpDelete(s.partKey(sv.Gen, part)))
		default:
			parts = append(parts, clientv3.OpPut(s.partKey(sv.Gen, part), string(b)))
		}
		size += opBytes(parts[len(parts)-1])
	}
	ops := []clientv3.Op{clientv3.OpPut(s.snapshotKey(), string(sv.State))}
	if p != nil {
		op, err := s.placementOp(*p)
		if err != nil {
			return 0, fmt.Errorf("meta: put snapshot: %w", err)
		}
		ops = append(ops, op)
	}
	if sv.Rewrite {
		// The others' records go with the blob that stops naming them.
		gen, end := s.genPrefix(sv.Gen), clientv3.GetPrefixRangeEnd(s.partsKey())
		ops = append(ops, clientv3.OpPut(s.genKey(), strconv.FormatUint(sv.Gen, 10)),
			clientv3.OpDelete(s.partsKey(), clientv3.WithRange(gen)),
			clientv3.OpDelete(strings.TrimSuffix(gen, "/")+"0", clientv3.WithRange(end)))
		// Whatever a dead leader's rewrite left under this generation.
		if _, err := s.retryGuarded(ctx, lead, clientv3.OpDelete(gen, clientv3.WithPrefix())); err != nil {
			return 0, fmt.Errorf("meta: put snapshot: %w", err)
		}
		if len(ops)+len(parts) > maxTxnOps || size > maxTxnBytes {
			if err := s.putBatches(ctx, lead, parts); err != nil {
				return 0, fmt.Errorf("meta: put snapshot: %w", err)
			}
			parts = nil
		}
	} else if len(ops)+len(parts) > maxTxnOps || size > maxTxnBytes {
		return 0, fmt.Errorf("meta: put snapshot: %w: %d records, %d bytes: more than one transaction holds, and not a rewrite", ErrInvalid, len(parts), size)
	}
	// A proposal that reached an etcd leader which then died is dropped,
	// and its request waits out its whole deadline; the members elect a new
	// leader within about one election timeout. So each attempt gets a
	// short deadline, and a timed-out one is tried again (the puts are
	// idempotent; if the first attempt did commit, the epoch is the second
	// one's revision, which the placement then carries) until ctx runs out.
	resp, err := s.retryGuarded(ctx, lead, append(ops, parts...)...)
	if err != nil {
		return 0, fmt.Errorf("meta: put snapshot: %w", err)
	}
	if p == nil {
		return 0, nil
	}
	return uint64(resp.Header.Revision), nil
}

func opBytes(op clientv3.Op) int { return len(op.KeyBytes()) + len(op.ValueBytes()) }

// putBatches writes ops in transactions of at most maxTxnOps operations
// and maxTxnBytes.
func (s *Store) putBatches(ctx context.Context, lead *Leadership, ops []clientv3.Op) error {
	for len(ops) > 0 {
		n, size := 0, 0
		for n < len(ops) && n < maxTxnOps && (n == 0 || size+opBytes(ops[n]) <= maxTxnBytes) {
			size += opBytes(ops[n])
			n++
		}
		if _, err := s.retryGuarded(ctx, lead, ops[:n]...); err != nil {
			return err
		}
		ops = ops[n:]
	}
	return nil
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
	// Gen and Parts are the generation of partition records State names,
	// and its records, by partition.
	Gen   uint64
	Parts map[int][]byte
	// Epoch is the current configuration epoch: the placement's
	// ModRevision, 0 before the first.
	Epoch uint64
	// Rev is the revision of the state's last save.
	Rev int64
}

// Snapshot returns the last saved coordinator state with the epoch, read
// together, or ErrNotFound.
func (s *Store) Snapshot(ctx context.Context) (Saved, error) {
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.snapshotKey()), clientv3.OpGet(s.placementKey()),
		clientv3.OpGet(s.genKey()), clientv3.OpGet(s.partsKey(), clientv3.WithPrefix())).Commit()
	if err != nil {
		return Saved{}, fmt.Errorf("meta: snapshot: %w", err)
	}
	state, placement := resp.Responses[0].GetResponseRange(), resp.Responses[1].GetResponseRange()
	gen, parts := resp.Responses[2].GetResponseRange(), resp.Responses[3].GetResponseRange()
	if len(state.Kvs) == 0 {
		return Saved{}, fmt.Errorf("meta: snapshot: %w", ErrNotFound)
	}
	sv := Saved{State: state.Kvs[0].Value, Rev: state.Kvs[0].ModRevision, Parts: map[int][]byte{}}
	if len(placement.Kvs) > 0 {
		sv.Epoch = uint64(placement.Kvs[0].ModRevision)
	}
	if len(gen.Kvs) > 0 {
		if sv.Gen, err = strconv.ParseUint(string(gen.Kvs[0].Value), 10, 64); err != nil {
			return Saved{}, fmt.Errorf("meta: snapshot: %w: generation %q", ErrCorrupt, gen.Kvs[0].Value)
		}
	}
	// Only the generation named: another's are what a leader that died
	// in the middle of a rewrite left, which the next rewrite deletes.
	pfx := s.genPrefix(sv.Gen)
	for _, kv := range parts.Kvs {
		name, ok := strings.CutPrefix(string(kv.Key), pfx)
		if !ok {
			continue
		}
		p, err := strconv.Atoi(name)
		if err != nil || p < 0 {
			return Saved{}, fmt.Errorf("meta: snapshot: %w: key %q", ErrCorrupt, kv.Key)
		}
		sv.Parts[p] = kv.Value
	}
	return sv, nil
}

// ForgetState deletes the last saved coordinator state (its blob and
// records), the placement and every partition state, only while lead is current, leaving etcd as a
// new cluster finds it (the event timeline and the members' registrations
// stay): what a coordinator does when it resumes from a checkpoint
// because every server of the saved state is gone. A coordinator that
// dies after it keeps to the decision: it finds no saved state, and
// resumes.
func (s *Store) ForgetState(ctx context.Context, lead *Leadership) error {
	_, err := s.retryGuarded(ctx, lead, clientv3.OpDelete(s.snapshotKey()), clientv3.OpDelete(s.placementKey()),
		clientv3.OpDelete(s.genKey()), clientv3.OpDelete(s.partsKey(), clientv3.WithPrefix()),
		clientv3.OpDelete(s.pstateKey(), clientv3.WithPrefix()))
	if err != nil {
		return fmt.Errorf("meta: forget state: %w", err)
	}
	return nil
}
