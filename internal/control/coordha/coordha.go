package coordha

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/control/coord"
	"github.com/terrace-ml/terrace/internal/control/meta"
	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/storage/checkpoint"
)

// errListen: a replica that leads could not bind its listen address.
var errListen = errors.New("cannot listen on")

// standbyReads is how many reads of the election a second apart must
// find the same other leader before a standby says so: longer than a
// lapsing term's lease (meta.SessionTTL, which etcd may extend by an
// election timeout when it restarts).
const standbyReads = meta.SessionTTL + 3

// listenWait bounds how long a replica that leads tries its listen
// address: its previous term frees it at once (Run returns only after
// Serve did).
var listenWait = 10 * time.Second

// Config configures Run.
type Config struct {
	// ID names this coordinator replica in the election.
	ID string
	// Listen is the HTTP control-plane address, bound once this replica
	// leads (a standby does not listen, so clients move on to the leader).
	Listen  string
	Options coord.Options
	// Endpoints of an external etcd cluster. When empty, the coordinator
	// runs an embedded etcd member configured by Embed.
	Endpoints []string
	Embed     meta.EmbedConfig
	// Prefix separates clusters sharing one etcd.
	Prefix string
	Logger *slog.Logger
	// Ready, when set, is told once this replica leads and listens;
	// SteppedDown, when set, once a term ends and the replica campaigns
	// again (what Ready handed out no longer serves).
	Ready       func(c *coord.Coordinator, addr string)
	SteppedDown func()
	// Standby, when set, is told once a campaign finds another replica
	// leading, with its ID: a standby prints nothing else until it leads.
	Standby func(leader string)
	// Network is what the HTTP API listens on and, unless
	// Options.Network is set, what the failure detector dials (TCP if nil).
	Network transport.Network
	// EtcdTLS, when set, is the client TLS configuration for etcd.
	EtcdTLS *tls.Config
}

// Run takes part in the coordinator election until ctx ends: it waits to
// lead, restores the state the previous leader saved, and coordinates,
// saving every change. It returns an error if it loses the lead (another
// replica has taken over, and the process should stop).
func Run(ctx context.Context, cfg Config) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ID == "" {
		h, _ := os.Hostname()
		cfg.ID = fmt.Sprintf("coordinator-%s-%d", h, os.Getpid())
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "/terrace"
	}
	endpoints := cfg.Endpoints
	if len(endpoints) == 0 {
		if cfg.Embed.Name == "" {
			cfg.Embed.Name = cfg.ID
		}
		if cfg.Embed.Dir == "" {
			dir, err := os.MkdirTemp("", "terrace-etcd-")
			if err != nil {
				return err
			}
			cfg.Embed.Dir = dir
			// Nobody asked to keep it: it goes when the coordinator does
			// (about 60 MB a run were left behind in /tmp before).
			defer os.RemoveAll(dir)
			cfg.Logger.Info("embedded etcd data in a temporary directory, removed on exit; pass --etcd-dir to keep it", "dir", dir)
		}
		if cfg.Embed.Waiting == nil && cfg.Embed.InitialCluster != "" {
			members := len(strings.Split(cfg.Embed.InitialCluster, ","))
			cfg.Embed.Waiting = func(waited time.Duration) {
				cfg.Logger.Warn(fmt.Sprintf("embedded etcd member not ready after %s: a cluster of %d members serves once %d of them are up; start the other coordinators of --etcd-cluster (Ctrl-C or SIGTERM stops this one)",
					waited, members, members/2+1), "member", cfg.Embed.Name)
			}
		}
		e, err := meta.StartEmbedded(ctx, cfg.Embed)
		if err != nil {
			return fmt.Errorf("coordinator: embedded etcd: %w", err)
		}
		defer e.Close()
		endpoints = e.Endpoints()
	}
	if cfg.Options.Network == nil {
		cfg.Options.Network = cfg.Network
	}
	st, err := meta.Open(ctx, endpoints, cfg.Prefix, meta.WithTLS(cfg.EtcdTLS))
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	defer st.Close()
	back := "a majority of the etcd cluster's members is up again"
	if n := len(strings.Split(cfg.Embed.InitialCluster, ",")); len(cfg.Endpoints) == 0 && n > 1 {
		back = fmt.Sprintf("%d of the %d coordinators of --etcd-cluster are up again (start the stopped ones with their --etcd-dir)", n/2+1, n)
	}
	qctx, qcancel := context.WithCancel(ctx)
	defer qcancel()
	go watchQuorum(qctx, st.Quorum, &quorumWatch{log: cfg.Logger.With("id", cfg.ID), back: back})
	// A replica that loses the lead (its etcd session lapsed, say while
	// etcd re-elects its own leader) steps down and campaigns again: it
	// must not exit, since its embedded etcd member is part of the quorum.
	// A later term listens where the first did: the nodes know only that
	// address, and with --listen HOST:0 (every drill's) each term got a
	// new port, so a coordinator paused for two seconds on a loaded host
	// came back where no node looked and the job failed.
	ready := cfg.Ready
	cfg.Ready = func(c *coord.Coordinator, addr string) {
		// A later term restores what this one saves, never the checkpoint.
		cfg.Listen, cfg.Options.Resume = addr, false
		if ready != nil {
			ready(c, addr)
		}
	}
	for ctx.Err() == nil {
		if err := lead(ctx, st, &cfg); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, errListen) {
				return err // no later term can listen either
			}
			if errors.Is(err, checkpoint.ErrNoCheckpoint) {
				// --resume with nothing to resume from: no later term
				// finds more. Campaigning again, the replica sat
				// unreachable for good after one warning.
				return err
			}
			cfg.Logger.Warn("stepped down as coordinator; campaigning again", "id", cfg.ID, "err", err)
			if cfg.SteppedDown != nil {
				cfg.SteppedDown()
			}
			select {
			case <-time.After(200 * time.Millisecond):
			case <-ctx.Done():
			}
		}
	}
	return nil
}

// announceStandby tells standby, once, the leader's ID once a replica
// other than id has led through standbyReads reads of the election a
// second apart, until ctx ends. A replica that waits to lead printed
// nothing at all, and its user could not tell a standby from a hung
// start. A coordinator SIGKILLed and started again on its --etcd-dir
// finds its dead term's key for a second or two (etcd restores a
// lease's TTL when it restarts), and said it stood by that one.
func announceStandby(ctx context.Context, st *meta.Store, id string, standby func(leader string)) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	seen, reads := "", 0
	for {
		leader, err := st.Leader(ctx)
		switch {
		case err != nil || leader == id:
			seen, reads = "", 0
		case leader == seen:
			reads++
		default:
			seen, reads = leader, 1
		}
		if reads >= standbyReads {
			standby(leader)
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// lead campaigns, and once elected restores the saved state and serves
// until ctx ends (nil) or the lead is lost (an error).
func lead(ctx context.Context, st *meta.Store, cfg *Config) error {
	stopAnnounce := func() {}
	if cfg.Standby != nil {
		var actx context.Context
		actx, stopAnnounce = context.WithCancel(ctx)
		go announceStandby(actx, st, cfg.ID, cfg.Standby)
	}
	l, err := st.Campaign(ctx, cfg.ID)
	stopAnnounce() // this replica leads, or stops
	if err != nil {
		return fmt.Errorf("coordinator %s: campaign: %w", cfg.ID, err)
	}
	took := time.Now()
	saved, err := st.Snapshot(ctx)
	opts := cfg.Options
	opts.Logger = cfg.Logger
	opts.Membership = membership(ctx, st, *cfg)
	var c *coord.Coordinator
	if err == nil && opts.Resume {
		// The saved state is newer than any checkpoint, and wins while a
		// server of it still holds the model. When none does (the whole
		// cluster died, and came back as new processes), the newest
		// checkpoint is all that is left of the job.
		c, err = resumeLost(ctx, st, l, cfg, opts, saved.State)
		if c == nil {
			opts.Resume = false
		}
	}
	if c == nil {
		var oerr error
		if c, oerr = coord.Open(opts); oerr != nil {
			return oerr
		}
	}
	switch {
	case err == nil:
		if err := c.Restore(coord.Saved{State: saved.State, Gen: saved.Gen, Parts: saved.Parts}, saved.Epoch); err != nil {
			return err
		}
		cfg.Logger.Warn("took over as coordinator; state restored", "id", cfg.ID)
	case errors.Is(err, meta.ErrNotFound):
	default:
		return fmt.Errorf("coordinator %s: %w", cfg.ID, err)
	}
	if err := c.SetStateStore(ctx, partStates{st, l}); err != nil {
		return err
	}
	if err := c.SetEventStore(ctx, eventStore{st, l}, cfg.ID); err != nil {
		return err
	}
	keep := c.StateVersions()
	if n, err := st.SweepPartStates(ctx, l, func(p int, ver uint64) bool { return slices.Contains(keep[p], ver) }); err != nil {
		cfg.Logger.Warn("could not sweep partition states a previous leader left unsaved", "err", err)
	} else if n > 0 {
		cfg.Logger.Info("swept partition states a previous leader left unsaved", "versions", n)
	}
	// A save that fails means this replica can no longer act for the
	// cluster (its lead lapsed, or etcd did not answer): it steps down, so
	// that a replica (possibly itself, again) takes over from the last
	// saved state instead of this one answering 503 while it holds the
	// election.
	stepDown := make(chan error, 1)
	// The configuration epoch is the revision of the save that begins it,
	// which also writes the placement (meta's design note).
	c.SetPersist(func(ctx context.Context, sv *coord.Save, lay *layout.Layout) (uint64, error) {
		var p *meta.Placement
		if lay != nil {
			p = &meta.Placement{Servers: lay.Servers, VNodes: lay.VNodes, Replication: min(lay.K(), len(lay.Servers))}
		}
		epoch, err := st.PutSnapshot(ctx, l, meta.Save{State: sv.State, Gen: sv.Gen, Parts: sv.Parts, Rewrite: sv.Rewrite}, p)
		if errors.Is(err, meta.ErrNotLeader) {
			err = fmt.Errorf("%w: %w", api.ErrNotLeader, err)
		}
		if err != nil {
			select {
			case stepDown <- err:
			default:
			}
		}
		return epoch, err
	})
	var ln net.Listener
	var start time.Time // of the first failed try
	for {
		// The listen address may still be held for a moment by the
		// previous term of this replica; for longer, another process
		// holds it, and a coordinator that retried in silence looked hung.
		if ln, err = transport.OrTCP(cfg.Network).Listen(cfg.Listen); err == nil {
			break
		}
		if start.IsZero() {
			start = time.Now()
			cfg.Logger.Warn("listen address in use; retrying", "addr", cfg.Listen, "gives_up_after", listenWait, "err", err)
		}
		if time.Since(start) > listenWait {
			return fmt.Errorf("coordinator %s: %w %s: %w (after %v; another process holds the address?)", cfg.ID, errListen, cfg.Listen, err, listenWait)
		}
		select {
		case <-l.Lost():
			return fmt.Errorf("coordinator %s: lost the lead before listening", cfg.ID)
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return nil
		}
	}
	cfg.Logger.Info("leading", "id", cfg.ID, "addr", ln.Addr().String(), "election_to_listen", time.Since(took))
	if cfg.Ready != nil {
		cfg.Ready(c, ln.Addr().String())
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- c.Serve(lctx, ln, cfg.Logger) }()
	go compact(lctx, st, cfg.Logger)
	for _, role := range []string{api.RoleServer, api.RoleWorker} {
		go watchMembers(lctx, st, c, role, saved.Rev, cfg.Logger)
	}
	select {
	case err := <-errc:
		return err
	case <-l.Lost():
		cancel()
		<-errc
		return fmt.Errorf("coordinator %s: lost the lead", cfg.ID)
	case err := <-stepDown:
		cancel()
		<-errc
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
		l.Resign(rctx)
		rcancel()
		return fmt.Errorf("coordinator %s: could not save its state: %w", cfg.ID, err)
	}
}

// lostWindow is how long a coordinator resuming over a saved state asks
// that state's servers whether they still hold its model: failure
// timeouts enough for a live server to answer through a slow moment.
func lostWindow(o coord.Options) time.Duration {
	ft := o.FailureTimeout
	if ft <= 0 {
		ft = coord.DefaultFailureTimeout
	}
	return max(3*ft, 3*time.Second)
}

// resumeLost decides, for a coordinator started with --resume over a
// state etcd holds, which of the two goes on. The saved state does while
// any server of its layout holds the model (a coordinator restarted
// alone): it is newer than any checkpoint. When every server is gone,
// so is the model, and the newest checkpoint is the way on: resumeLost
// opens a coordinator from it, forgets the saved state in etcd (a
// coordinator that dies next finds none, and resumes too), and returns
// it with meta.ErrNotFound, which tells lead to restore nothing. It
// returns a nil coordinator (and the saved state's nil error) when the
// saved state goes on, saying why --resume was passed over.
func resumeLost(ctx context.Context, st *meta.Store, l *meta.Leadership, cfg *Config, opts coord.Options, blob []byte) (*coord.Coordinator, error) {
	cfg.Logger.Warn("--resume over a state etcd holds: asking that state's servers whether they still hold its model", "id", cfg.ID, "for_at_most", lostWindow(opts))
	lost, ok := coord.Lost(ctx, opts, blob, lostWindow(opts))
	if ctx.Err() != nil {
		return nil, nil
	}
	if !ok {
		cfg.Logger.Warn("--resume passed over: etcd holds this cluster's state, newer than any checkpoint, and a server of it holds the model (or its job is not under way)", "id", cfg.ID)
		return nil, nil
	}
	c, err := coord.Open(opts)
	if err != nil {
		cfg.Logger.Error("every server of the cluster etcd holds is gone, and the model with them, but no checkpoint resumes: the job goes on from etcd's state, from zero", "servers", lost.Servers, "passes_done", lost.PassesDone, "err", err)
		return nil, nil
	}
	if err := st.ForgetState(ctx, l); err != nil {
		return nil, fmt.Errorf("coordinator %s: setting aside the state of a lost cluster: %w", cfg.ID, err)
	}
	seq, passes, _ := c.Resuming()
	cfg.Logger.Warn("every server of the cluster etcd holds is gone, and the model with them: resuming from the newest checkpoint instead of etcd's state",
		"servers", lost.Servers, "passes_done", lost.PassesDone, "checkpoint", seq, "checkpoint_passes_done", passes)
	c.NoteResumedLost(cfg.ID, fmt.Sprintf("every server of the saved cluster (%s) was gone, with the model: resumed from checkpoint %d (%d pass(es) done) instead of etcd's state (%d)",
		strings.Join(lost.Servers, ", "), seq, passes, lost.PassesDone))
	return c, meta.ErrNotFound
}

// membership tells nodes where to register: every member of the etcd
// cluster, so that a node keeps its registration through the loss of any
// one member (the configured endpoints if the member list is unavailable).
func membership(ctx context.Context, st *meta.Store, cfg Config) *layout.Membership {
	m := &layout.Membership{Endpoints: cfg.Endpoints, Prefix: cfg.Prefix}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	urls, err := st.ClientURLs(lctx)
	if err == nil && len(urls) > 0 {
		m.Endpoints = urls
	} else if len(m.Endpoints) == 0 {
		cfg.Logger.Warn("no etcd endpoints to give the nodes: they will not register", "err", err)
		return nil
	}
	return m
}

// watchMembers tells c of every node of role whose registration ends,
// until ctx ends; c decides whether the node is gone. It starts from revision from, the previous leader's
// last save, so that registrations that ended during the failover are
// heard too (MemberGone ignores what the previous leader already
// handled). If that history has been compacted it starts from now, and
// nodes that died meanwhile are left to the coordinator's own detection.
func watchMembers(ctx context.Context, st *meta.Store, c *coord.Coordinator, role string, from int64, log *slog.Logger) {
	for ctx.Err() == nil {
		for ev := range st.WatchMembers(ctx, role, from) {
			from = ev.Rev
			if ev.Deleted {
				// MemberGone checks with the node before it acts (and logs).
				go c.MemberGone(ctx, role, ev.ID, ev.Info.Labels[layout.IncarnationLabel])
			}
		}
		// The watch ended: ctx ended, or the history after from was
		// compacted.
		if ctx.Err() == nil {
			_, rev, err := st.Members(ctx, role)
			if err != nil {
				select {
				case <-time.After(200 * time.Millisecond):
				case <-ctx.Done():
				}
				continue
			}
			from = rev
		}
	}
}

// partStates keeps the coordinator's partition state blobs in etcd, written
// under this replica's leadership.
type partStates struct {
	st   *meta.Store
	lead *meta.Leadership
}

// eventStore keeps the coordinator's timeline in etcd under its lead.
type eventStore struct {
	st   *meta.Store
	lead *meta.Leadership
}

func (e eventStore) PutEvents(ctx context.Context, evs []api.Event, kept api.EventsKept) error {
	return e.st.PutEvents(ctx, e.lead, evs, kept)
}

func (e eventStore) Events(ctx context.Context) ([]api.Event, error) { return e.st.Events(ctx) }

func (p partStates) PutState(ctx context.Context, part int, ver uint64, blob []byte) error {
	return p.st.PutPartState(ctx, p.lead, part, ver, blob)
}

func (p partStates) GetState(ctx context.Context, part int, ver uint64) ([]byte, error) {
	blob, err := p.st.PartState(ctx, part, ver)
	if errors.Is(err, meta.ErrNotFound) {
		return nil, fmt.Errorf("%w: %v", api.ErrNoState, err)
	}
	return blob, err
}

func (p partStates) DeleteState(ctx context.Context, part int, ver uint64) error {
	return p.st.DeletePartState(ctx, p.lead, part, ver)
}

// CompactEvery is how often the leader discards etcd's history, keeping
// the last CompactEvery of it. The coordinator rewrites its state on every
// change and partition states with every progress report (megabytes a
// second for an LDA sampler), and etcd keeps every revision until
// compacted: with the embedded member's own 10-minute retention the data
// file grew by 345 MB in a 39 s run. Nothing of the coordinator's reads
// old revisions.
const CompactEvery = 10 * time.Second

func compact(ctx context.Context, st *meta.Store, log *slog.Logger) {
	t := time.NewTicker(CompactEvery)
	defer t.Stop()
	var prev int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rev, err := st.Revision(ctx)
		if err != nil {
			continue
		}
		if prev > 0 {
			if err := st.Compact(ctx, prev); err != nil && ctx.Err() == nil {
				log.Warn("could not compact etcd's history", "err", err)
			}
		}
		prev = rev
	}
}
