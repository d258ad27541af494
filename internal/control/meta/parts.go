package meta

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Progress is how far a data partition has been trained. It outlives the
// worker that wrote it, so a worker that takes the partition over resumes
// where the last holder stopped.
type Progress struct {
	// Epoch is the number of completed passes over the partition (not the
	// configuration epoch).
	Epoch int `json:"epoch"`
	// Offset is the next record to train within the current pass.
	Offset int `json:"offset"`
	// Worker wrote this progress.
	Worker string `json:"worker"`
}

// PartitionEvent is a change of a partition's holder; Deleted means the
// partition is free.
type PartitionEvent struct {
	P       int
	Worker  string
	Deleted bool
	Rev     int64
}

func checkPart(p int) error {
	if p < 0 {
		return fmt.Errorf("%w: negative partition %d", ErrInvalid, p)
	}
	return nil
}

// AcquirePartition leases partition p to worker (m's id if empty), bound
// to m's lease, if no one holds it, and reports whether worker now holds it (true as well if
// it already did under m). When m's lease ends, by Leave, eviction or
// expiry, the partition is free again without anyone releasing it.
func (s *Store) AcquirePartition(ctx context.Context, p int, worker string, m *Member) (bool, error) {
	if err := checkPart(p); err != nil {
		return false, fmt.Errorf("meta: acquire partition: %w", err)
	}
	if worker == "" {
		worker = m.id
	}
	key := s.partKey(p)
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, worker, clientv3.WithLease(m.lease))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return false, fmt.Errorf("meta: acquire partition %d for %s: %w", p, worker, err)
	}
	if resp.Succeeded {
		return true, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	held := len(kvs) > 0 && string(kvs[0].Value) == worker && clientv3.LeaseID(kvs[0].Lease) == m.lease
	return held, nil
}

// ReleasePartition frees partition p if worker holds it, and fails with
// ErrNotHolder otherwise. Its progress stays.
func (s *Store) ReleasePartition(ctx context.Context, p int, worker string) error {
	key := s.partKey(p)
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(key), "=", worker)).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("meta: release partition %d from %s: %w", p, worker, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("meta: release partition %d from %s: %w", p, worker, ErrNotHolder)
	}
	return nil
}

// PartitionOwners returns the holder of every held partition and the
// revision of the read, from which WatchPartitions continues.
func (s *Store) PartitionOwners(ctx context.Context) (map[int]string, int64, error) {
	resp, err := s.cli.Get(ctx, s.partsKey(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("meta: partition owners: %w", err)
	}
	out := make(map[int]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		p, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), s.partsKey()))
		if err != nil {
			return nil, 0, fmt.Errorf("meta: partition owners: key %s: %w", kv.Key, err)
		}
		out[p] = string(kv.Value)
	}
	return out, resp.Header.Revision, nil
}

// WatchPartitions streams changes of partition holders after revision
// fromRev (as returned by PartitionOwners; 0 means from now). The channel
// closes as WatchMembers's does.
func (s *Store) WatchPartitions(ctx context.Context, fromRev int64) <-chan PartitionEvent {
	pfx := s.partsKey()
	return watch(ctx, s, pfx, fromRev, func(ev *clientv3.Event) (PartitionEvent, bool) {
		p, err := strconv.Atoi(strings.TrimPrefix(string(ev.Kv.Key), pfx))
		if err != nil {
			return PartitionEvent{}, false
		}
		return PartitionEvent{P: p, Worker: string(ev.Kv.Value), Deleted: ev.Type == clientv3.EventTypeDelete, Rev: ev.Kv.ModRevision}, true
	})
}

// holderPut writes ops only while m holds partition p (under worker's
// name, unless worker is empty):
// a worker whose lease has expired, and whose partition someone else may
// have taken, cannot overwrite the new holder's progress.
func (s *Store) holderPut(ctx context.Context, p int, worker string, m *Member, ops ...clientv3.Op) error {
	key := s.partKey(p)
	// The lease is what makes m the holder; the name is checked too when
	// the write records it.
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(key), "=", m.lease)}
	if worker != "" {
		cmps = append(cmps, clientv3.Compare(clientv3.Value(key), "=", worker))
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: %d by %s", ErrNotHolder, p, worker)
	}
	return nil
}

// SetProgress records pr for partition p if m, under the name pr.Worker
// (m's id if empty), holds it; otherwise it fails with ErrNotHolder.
func (s *Store) SetProgress(ctx context.Context, p int, pr Progress, m *Member) error {
	if err := checkPart(p); err != nil {
		return fmt.Errorf("meta: set progress: %w", err)
	}
	if pr.Worker == "" {
		pr.Worker = m.id
	}
	val, err := json.Marshal(pr)
	if err != nil {
		return fmt.Errorf("meta: set progress %d: %w", p, err)
	}
	if err := s.holderPut(ctx, p, pr.Worker, m, clientv3.OpPut(s.progressKey(p), string(val))); err != nil {
		return fmt.Errorf("meta: set progress %d: %w", p, err)
	}
	return nil
}

// Progress returns partition p's last recorded progress; the zero Progress
// (start from the beginning) if none was ever recorded.
func (s *Store) Progress(ctx context.Context, p int) (Progress, error) {
	resp, err := s.cli.Get(ctx, s.progressKey(p))
	if err != nil {
		return Progress{}, fmt.Errorf("meta: progress %d: %w", p, err)
	}
	var pr Progress
	if len(resp.Kvs) > 0 {
		if err := json.Unmarshal(resp.Kvs[0].Value, &pr); err != nil {
			return Progress{}, fmt.Errorf("meta: progress %d: %w", p, err)
		}
	}
	return pr, nil
}
