package meta

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/terrace-ml/terrace/internal/crc32c"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Partition state blobs (a worker's state for one data partition, see
// docs/design/partstate.md) are written by the coordinator's leader under
// its leadership, one version at a time, in chunks: etcd refuses requests
// over 1.5 MiB by default, and a blob may be larger. Each version is
//
//	P/pstate/<p>/<ver>/c<i>   chunk i, at most StateChunk bytes
//	P/pstate/<p>/<ver>/h      header: size, chunk count, CRC32C
//
// The header is written with the last chunk (a small blob takes one
// request): a version without one (its writer died part way) does not
// exist for readers, and the next leader's sweep removes it. Chunks past
// the header's count (left by a longer blob written under the same
// version) are ignored.

// StateChunk is the largest chunk of a state blob in one etcd request.
const StateChunk = 512 << 10

// ErrCorrupt marks a stored blob whose chunks do not match its header.
var ErrCorrupt = errors.New("corrupt stored value")

func (s *Store) pstateKey() string { return s.key("pstate") + "/" }

func (s *Store) pstateVerKey(p int, ver uint64) string {
	return s.pstateKey() + strconv.Itoa(p) + "/" + strconv.FormatUint(ver, 10) + "/"
}

// PutPartState stores version ver of partition p's state, while lead is
// current. Writing a version again replaces it.
func (s *Store) PutPartState(ctx context.Context, lead *Leadership, p int, ver uint64, blob []byte) error {
	if p < 0 {
		return fmt.Errorf("meta: put partition state: %w: negative partition %d", ErrInvalid, p)
	}
	pfx := s.pstateVerKey(p, ver)
	n := max(1, (len(blob)+StateChunk-1)/StateChunk)
	h := binary.AppendUvarint(nil, uint64(len(blob)))
	h = binary.AppendUvarint(h, uint64(n))
	h = binary.LittleEndian.AppendUint32(h, crc32c.Checksum(blob))
	for i := range n {
		chunk := blob[i*StateChunk : min((i+1)*StateChunk, len(blob))]
		ops := []clientv3.Op{clientv3.OpPut(pfx+"c"+strconv.Itoa(i), string(chunk))}
		if i == 0 && n > 1 {
			// A version written again (by a new leader that reused the
			// number of an unsaved one) loses its old header first;
			// chunks past the new count are never read.
			ops = append(ops, clientv3.OpDelete(pfx+"h"))
		}
		if i == n-1 {
			ops = append(ops, clientv3.OpPut(pfx+"h", string(h)))
		}
		if _, err := s.retryGuarded(ctx, lead, ops...); err != nil {
			return fmt.Errorf("meta: put partition %d state %d: %w", p, ver, err)
		}
	}
	return nil
}

// PartState returns version ver of partition p's state: ErrNotFound if it
// was never completely written, ErrCorrupt if its chunks do not add up.
func (s *Store) PartState(ctx context.Context, p int, ver uint64) ([]byte, error) {
	pfx := s.pstateVerKey(p, ver)
	resp, err := s.cli.Get(ctx, pfx, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("meta: partition %d state %d: %w", p, ver, err)
	}
	chunks := map[int][]byte{}
	var head []byte
	for _, kv := range resp.Kvs {
		name := strings.TrimPrefix(string(kv.Key), pfx)
		if name == "h" {
			head = kv.Value
			continue
		}
		if i, err := strconv.Atoi(strings.TrimPrefix(name, "c")); err == nil && strings.HasPrefix(name, "c") {
			chunks[i] = kv.Value
		}
	}
	if head == nil {
		return nil, fmt.Errorf("meta: partition %d state %d: %w", p, ver, ErrNotFound)
	}
	size, k := binary.Uvarint(head)
	n, k2 := binary.Uvarint(head[max(k, 0):])
	if k <= 0 || k2 <= 0 || len(head) != k+k2+4 || size > uint64(n)*StateChunk {
		return nil, fmt.Errorf("meta: partition %d state %d: %w: bad header", p, ver, ErrCorrupt)
	}
	blob := make([]byte, 0, size)
	for i := range int(n) {
		c, ok := chunks[i]
		if !ok {
			return nil, fmt.Errorf("meta: partition %d state %d: %w: chunk %d of %d missing", p, ver, ErrCorrupt, i, n)
		}
		blob = append(blob, c...)
	}
	if uint64(len(blob)) != size || crc32c.Checksum(blob) != binary.LittleEndian.Uint32(head[k+k2:]) {
		return nil, fmt.Errorf("meta: partition %d state %d: %w: %d bytes, header says %d, or checksum mismatch", p, ver, ErrCorrupt, len(blob), size)
	}
	return blob, nil
}

// DeletePartState removes version ver of partition p's state, while lead
// is current.
func (s *Store) DeletePartState(ctx context.Context, lead *Leadership, p int, ver uint64) error {
	if _, err := s.retryGuarded(ctx, lead, clientv3.OpDelete(s.pstateVerKey(p, ver), clientv3.WithPrefix())); err != nil {
		return fmt.Errorf("meta: delete partition %d state %d: %w", p, ver, err)
	}
	return nil
}

// SweepPartStates removes every stored state version that keep refuses
// (it keeps the versions the coordinator's saved state names), while lead
// is current: what a leader that died between writing a version and
// saving it left behind. It returns how many versions it removed.
func (s *Store) SweepPartStates(ctx context.Context, lead *Leadership, keep func(p int, ver uint64) bool) (int, error) {
	pfx := s.pstateKey()
	resp, err := s.cli.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return 0, fmt.Errorf("meta: sweep partition states: %w", err)
	}
	type pv struct {
		p   int
		ver uint64
	}
	stale := map[pv]bool{}
	for _, kv := range resp.Kvs {
		f := strings.Split(strings.TrimPrefix(string(kv.Key), pfx), "/")
		if len(f) != 3 {
			continue
		}
		p, perr := strconv.Atoi(f[0])
		ver, verr := strconv.ParseUint(f[1], 10, 64)
		if perr != nil || verr != nil || keep(p, ver) {
			continue
		}
		stale[pv{p, ver}] = true
	}
	for v := range stale {
		if err := s.DeletePartState(ctx, lead, v.p, v.ver); err != nil {
			return 0, err
		}
	}
	return len(stale), nil
}

// retryGuarded commits ops under lead, trying again while attempts time
// out or etcd is between leaders (see PutSnapshot): the ops must be
// idempotent.
func (s *Store) retryGuarded(ctx context.Context, lead *Leadership, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	for {
		actx, cancel := context.WithTimeout(ctx, putAttempt)
		resp, err := s.guarded(actx, lead, ops...)
		cancel()
		if err == nil || ctx.Err() != nil {
			return resp, err
		}
		switch {
		case errors.Is(err, context.DeadlineExceeded):
		case betweenLeaders(err):
			if !pause(ctx, 20*time.Millisecond) {
				return resp, err
			}
		default:
			return resp, err
		}
	}
}

// betweenLeaders reports whether err says that etcd lost or changed its
// raft leader under the request, which a retry after the election cures.
func betweenLeaders(err error) bool {
	for _, e := range []error{rpctypes.ErrNoLeader, rpctypes.ErrLeaderChanged, rpctypes.ErrTimeout,
		rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
