package meta

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/table"
)

// TableEvent is a table that was created.
type TableEvent struct {
	Table layout.Table
	Rev   int64
}

// CreateTable creates the table spec names and returns its id, or returns
// the id of the existing table if its spec is identical (after Validate
// fills defaults), or fails with ErrTableConflict. Ids start at 1 and are
// allocated from a counter key written in the same transaction, so
// concurrent creators never share one.
func (s *Store) CreateTable(ctx context.Context, spec table.Spec) (uint32, error) {
	if err := spec.Validate(); err != nil {
		return 0, fmt.Errorf("meta: create table: %w", err)
	}
	if err := checkName("table", spec.Name); err != nil {
		return 0, fmt.Errorf("meta: create table: %w", err)
	}
	key, seq := s.tablesKey()+spec.Name, s.tableSeqKey()
	for {
		resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(key), clientv3.OpGet(seq)).Commit()
		if err != nil {
			return 0, fmt.Errorf("meta: create table %q: %w", spec.Name, err)
		}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			var t layout.Table
			if err := json.Unmarshal(kvs[0].Value, &t); err != nil {
				return 0, fmt.Errorf("meta: create table %q: %w", spec.Name, err)
			}
			if t.Spec != spec {
				return 0, fmt.Errorf("%w: %q is %+v, not %+v", ErrTableConflict, spec.Name, t.Spec, spec)
			}
			return t.ID, nil
		}
		var last uint64
		var seqRev int64
		if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
			if last, err = strconv.ParseUint(string(kvs[0].Value), 10, 32); err != nil {
				return 0, fmt.Errorf("meta: create table %q: counter: %w", spec.Name, err)
			}
			seqRev = kvs[0].ModRevision
		}
		id := uint32(last + 1)
		val, err := json.Marshal(layout.Table{ID: id, Spec: spec})
		if err != nil {
			return 0, fmt.Errorf("meta: create table %q: %w", spec.Name, err)
		}
		// Both the name and the counter must be as read; if another
		// creator got in between, read again.
		put, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
				clientv3.Compare(clientv3.ModRevision(seq), "=", seqRev)).
			Then(clientv3.OpPut(key, string(val)), clientv3.OpPut(seq, strconv.FormatUint(uint64(id), 10))).
			Commit()
		if err != nil {
			return 0, fmt.Errorf("meta: create table %q: %w", spec.Name, err)
		}
		if put.Succeeded {
			return id, nil
		}
	}
}

// Tables returns every table, by id, and the revision of the read.
func (s *Store) Tables(ctx context.Context) ([]layout.Table, int64, error) {
	resp, err := s.cli.Get(ctx, s.tablesKey(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("meta: tables: %w", err)
	}
	ts := make([]layout.Table, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var t layout.Table
		if err := json.Unmarshal(kv.Value, &t); err != nil {
			return nil, 0, fmt.Errorf("meta: tables: %s: %w", kv.Key, err)
		}
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b layout.Table) int { return cmp.Compare(a.ID, b.ID) })
	return ts, resp.Header.Revision, nil
}

// WatchTables streams the tables created after revision fromRev (as
// returned by Tables; 0 means from now). The channel closes as
// WatchMembers's does.
func (s *Store) WatchTables(ctx context.Context, fromRev int64) <-chan TableEvent {
	return watch(ctx, s, s.tablesKey(), fromRev, func(ev *clientv3.Event) (TableEvent, bool) {
		var t layout.Table
		if ev.Type != clientv3.EventTypePut || json.Unmarshal(ev.Kv.Value, &t) != nil {
			return TableEvent{}, false
		}
		return TableEvent{Table: t, Rev: ev.Kv.ModRevision}, true
	})
}
