package meta

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// SessionTTL is the lease, in seconds, behind a coordinator's leadership:
// a leader that stops renewing it is replaced about this long (plus up to
// half a second of etcd's expiry scan) later. It was 1 until the
// eighteenth session: on a loaded host a live coordinator's own lease
// lapsed 2 to 11 times a minute, each a step-down, a restore and a change
// lost (docs/design/resilience.md, "A failure timeout for loaded hosts").
const SessionTTL = 3

// Leadership is one term of a coordinator as leader.
type Leadership struct {
	id    string
	sess  *concurrency.Session
	elec  *concurrency.Election
	key   string // the election key this term created
	rev   int64  // its create revision: the term's identity
	store *Store
}

// Campaign blocks until id is the leader among the coordinators that
// campaign through this etcd prefix, or ctx ends. The term lasts while
// its session lease (SessionTTL) is kept alive; writes that must come
// from the current leader only take the Leadership as a guard.
func (s *Store) Campaign(ctx context.Context, id string) (*Leadership, error) {
	if err := checkName("id", id); err != nil {
		return nil, fmt.Errorf("meta: campaign: %w", err)
	}
	// Granting here rather than in NewSession bounds the grant by ctx; the
	// session's keep-alive still runs until Resign or the Store closes.
	g, err := s.cli.Grant(ctx, SessionTTL)
	if err != nil {
		return nil, fmt.Errorf("meta: campaign %s: grant lease: %w", id, err)
	}
	sess, err := concurrency.NewSession(s.cli, concurrency.WithLease(g.ID))
	if err != nil {
		s.revokeQuietly(ctx, g.ID)
		return nil, fmt.Errorf("meta: campaign %s: session: %w", id, err)
	}
	elec := concurrency.NewElection(sess, s.electionPrefix())
	if err := elec.Campaign(ctx, id); err != nil {
		sess.Close()
		return nil, fmt.Errorf("meta: campaign %s: %w", id, err)
	}
	l := &Leadership{id: id, sess: sess, elec: elec, key: elec.Key(), rev: elec.Rev(), store: s}
	// Campaign returns once every older candidate is gone, even if our
	// own lease expired meanwhile; check that this term still stands.
	resp, err := s.cli.Get(ctx, l.key)
	if err == nil && (len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != l.rev) {
		err = ErrNotLeader
	}
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("meta: campaign %s: lost the term while waiting: %w", id, err)
	}
	return l, nil
}

// ID returns the id the leader campaigned with.
func (l *Leadership) ID() string { return l.id }

// Lost is closed once the term's session lease is no longer kept alive;
// the leader must then stop acting as one. Guarded writes fail from the
// moment the lease is gone, whether or not Lost has fired yet.
func (l *Leadership) Lost() <-chan struct{} { return l.sess.Done() }

// Resign ends the term at once, so that another campaigner takes over
// without waiting for the TTL.
func (l *Leadership) Resign(ctx context.Context) error {
	err := l.elec.Resign(ctx)
	// Closing revokes the session lease, which would also delete the key.
	if cerr := l.sess.Close(); err == nil && cerr != nil && !errors.Is(cerr, context.Canceled) {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("meta: resign %s: %w", l.id, err)
	}
	return nil
}

// guarded commits ops only if l's term is current: the election key it
// created still exists with its create revision. A deposed leader's late
// write (after its lease expired or it resigned) fails with ErrNotLeader.
func (s *Store) guarded(ctx context.Context, l *Leadership, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	if l == nil {
		return nil, ErrNotLeader
	}
	if l.store.prefix != s.prefix {
		return nil, fmt.Errorf("%w: leadership of prefix %q used on %q", ErrInvalid, l.store.prefix, s.prefix)
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)).
		Then(ops...).
		Commit()
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		return nil, fmt.Errorf("%w: %s's term (revision %d) is over", ErrNotLeader, l.id, l.rev)
	}
	return resp, nil
}

// Leader returns the id of the current leader, or ErrNotFound if there is
// none.
func (s *Store) Leader(ctx context.Context) (string, error) {
	resp, err := s.cli.Get(ctx, s.electionPrefix()+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", fmt.Errorf("meta: leader: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return "", fmt.Errorf("meta: leader: %w", ErrNotFound)
	}
	return string(resp.Kvs[0].Value), nil
}
