package meta

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Errors callers can test with errors.Is.
var (
	// ErrUnavailable means etcd did not answer in time (no quorum, or no
	// endpoint reachable).
	ErrUnavailable = errors.New("etcd unavailable")
	// ErrInvalid marks a bad argument: an empty or '/'-containing name, a
	// bad address, an oversized state blob.
	ErrInvalid = errors.New("invalid argument")
	// ErrNotFound means the key asked for does not exist.
	ErrNotFound = errors.New("not found")
	// ErrMemberExists means a live member already holds that role and id.
	ErrMemberExists = errors.New("member already registered")
	// ErrNotLeader means a guarded write was refused because the writer's
	// leadership is no longer current.
	ErrNotLeader = errors.New("not the leader")
	// ErrDirInUse means another process holds an embedded member's data
	// directory open.
	ErrDirInUse = errors.New("data directory in use")
	// ErrDataDamaged means an embedded member's data directory holds a
	// database that does not open (truncated or overwritten).
	ErrDataDamaged = errors.New("data directory damaged")
)

// OpenTimeout bounds how long Open waits for etcd to answer.
const OpenTimeout = 3 * time.Second

// Store is a client of the cluster's etcd, with every key under one prefix.
type Store struct {
	cli    *clientv3.Client
	prefix string
}

// Open connects to etcd at endpoints ("host:port" or "http://host:port")
// and checks that a quorum answers, within ctx and at most OpenTimeout.
// Every key the Store reads or writes is under prefix, so several clusters
// can share one etcd.
func Open(ctx context.Context, endpoints []string, prefix string, opts ...OpenOption) (*Store, error) {
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("meta: open: %w: no endpoints", ErrInvalid)
	}
	prefix = strings.TrimRight(prefix, "/")
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: OpenTimeout,
		// Pings notice a silently dead endpoint so that the balancer moves
		// to another one well within a lease's TTL.
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		// Every failure is returned to the caller, so the client's retry
		// warnings would only repeat them.
		Logger: zap.NewNop(),
		TLS:    openConfig(opts).tls,
	})
	if err != nil {
		return nil, fmt.Errorf("meta: open %v: %w", endpoints, err)
	}
	// clientv3.New does not wait for a connection; a linearizable read
	// shows that an endpoint is up and its cluster has a quorum.
	pctx, cancel := context.WithTimeout(ctx, OpenTimeout)
	defer cancel()
	if _, err := cli.Get(pctx, prefix+"/", clientv3.WithCountOnly()); err != nil {
		cli.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("meta: open %v: %w", endpoints, ctx.Err())
		}
		return nil, fmt.Errorf("meta: open %v: %w: %w", endpoints, ErrUnavailable, err)
	}
	return &Store{cli: cli, prefix: prefix}, nil
}

// Quorum reports whether a quorum of etcd answers within ctx, by the
// linearizable read Open makes (ErrUnavailable if not).
func (s *Store) Quorum(ctx context.Context) error {
	if _, err := s.cli.Get(ctx, s.prefix+"/", clientv3.WithCountOnly()); err != nil {
		return fmt.Errorf("meta: %w: %w", ErrUnavailable, err)
	}
	return nil
}

// Close closes the connection without revoking anything: leases of
// members registered through it expire after their TTL, as if the
// process had died. Use Member.Leave for a planned departure.
func (s *Store) Close() error { return s.cli.Close() }

// Key layout; docs/design/meta.md describes it.
func (s *Store) key(parts ...string) string {
	return s.prefix + "/" + strings.Join(parts, "/")
}

func (s *Store) membersKey(role string) string { return s.key("members", role) + "/" }
func (s *Store) electionPrefix() string        { return s.key("election") }
func (s *Store) placementKey() string          { return s.key("placement") }

// checkName refuses names that would change the key layout.
func checkName(what, name string) error {
	if name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("%w: %s %q must be non-empty and without '/'", ErrInvalid, what, name)
	}
	return nil
}

// watch streams the changes to the keys under key (a prefix) that come
// after revision fromRev, converted by conv, until ctx ends. A watch that
// breaks (for instance because its etcd member lost its raft leader) is
// resumed from the last revision delivered, so no event is lost or
// repeated. The channel closes when ctx ends, or when the history after
// fromRev has been compacted away: the caller then reads afresh and
// watches from the revision of that read.
func watch[T any](ctx context.Context, s *Store, key string, fromRev int64, conv func(*clientv3.Event) (T, bool), opts ...clientv3.OpOption) <-chan T {
	out := make(chan T)
	// Calls on a closed client can take seconds to give up; ending ctx
	// with the Store ends them at once.
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.cli.Ctx(), cancel)
	go func() {
		defer close(out)
		defer stop()
		defer cancel()
		if fromRev <= 0 {
			resp, err := getRetrying(ctx, s, key)
			if err != nil {
				return
			}
			fromRev = resp.Header.Revision
		}
		next := fromRev + 1
		for ctx.Err() == nil {
			// Without a leader an etcd member would hold the watch open
			// but deliver nothing; requiring one makes it fail over.
			wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			for resp := range s.cli.Watch(wctx, key, append([]clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithRev(next)}, opts...)...) {
				if resp.CompactRevision != 0 {
					wcancel()
					return
				}
				if resp.Err() != nil {
					break
				}
				for _, ev := range resp.Events {
					next = ev.Kv.ModRevision + 1
					v, ok := conv(ev)
					if !ok {
						continue
					}
					select {
					case out <- v:
					case <-ctx.Done():
						wcancel()
						return
					}
				}
			}
			wcancel()
			if !pause(ctx, 100*time.Millisecond) {
				return
			}
		}
	}()
	return out
}

// revokeQuietly frees a lease that a failed call granted. It would expire
// by itself, so the revoke is bounded and its error ignored.
func (s *Store) revokeQuietly(ctx context.Context, id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	s.cli.Revoke(ctx, id)
}

// getRetrying reads key until it succeeds or ctx ends.
func getRetrying(ctx context.Context, s *Store, key string) (*clientv3.GetResponse, error) {
	for {
		resp, err := s.cli.Get(ctx, key, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil {
			return resp, nil
		}
		if !pause(ctx, 100*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
}

// pause waits d, or less if ctx ends; it reports whether ctx is still live.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Revision returns etcd's current revision.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	resp, err := s.cli.Get(ctx, s.key("revision-probe"), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("meta: revision: %w", err)
	}
	return resp.Header.Revision, nil
}

// Compact discards etcd's history before rev (for every prefix: etcd's
// history is one). A revision already compacted is not an error.
func (s *Store) Compact(ctx context.Context, rev int64) error {
	if _, err := s.cli.Compact(ctx, rev); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return fmt.Errorf("meta: compact to %d: %w", rev, err)
	}
	return nil
}

// ClientURLs returns the client URLs of every member of the etcd cluster,
// for nodes that must reach it through any member (a coordinator embeds
// one member and knows only its own address).
func (s *Store) ClientURLs(ctx context.Context) ([]string, error) {
	resp, err := s.cli.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("meta: member list: %w", err)
	}
	var urls []string
	for _, m := range resp.Members {
		urls = append(urls, m.ClientURLs...)
	}
	return urls, nil
}
