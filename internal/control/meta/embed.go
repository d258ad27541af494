package meta

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Default raft timing of an embedded member. etcd never grants a lease
// shorter than 1.5 election timeouts (rounded up to whole seconds), so with
// etcd's own defaults (100 ms / 1000 ms) the shortest lease is 2 s; 50 ms /
// 500 ms allow 1 s leases, which is what bounds failure detection. The
// heartbeat must stay well above the disk's fsync latency and the peers'
// round trip, so these suit one machine or one LAN, not a WAN.
const (
	DefaultTickMs     = 50
	DefaultElectionMs = 500
)

// EmbedConfig configures an etcd member run inside this process.
type EmbedConfig struct {
	// Name is the member's name in InitialCluster ("terrace" if empty).
	Name string
	// Dir is the data directory. A directory holding an earlier run's data
	// is resumed, and InitialCluster is then ignored.
	Dir string
	// ClientAddr and PeerAddr are host:port to listen on and to advertise
	// (so not 0.0.0.0); "127.0.0.1:0" if empty. Port 0 picks a free port,
	// which only a single member can use for PeerAddr: the other members
	// must know it in advance.
	ClientAddr, PeerAddr string
	// InitialCluster is "name=http://host:port,..." naming every member's
	// peer URL when several coordinators form one cluster; empty means a
	// cluster of this member alone.
	InitialCluster string
	// TickMs and ElectionMs are the raft heartbeat and election timeout;
	// DefaultTickMs and DefaultElectionMs if zero.
	TickMs, ElectionMs int
	// TLS, when set, serves clients and peers over mutual TLS (https
	// URLs; InitialCluster must then name https peer URLs).
	TLS *TLSFiles
	// Logger receives etcd's log. If nil, errors (other than the routine
	// ones of starting and closing) go to stderr and the rest is dropped.
	Logger *zap.Logger
	// Waiting, when set, is called every WaitingEvery (5 s if zero) while
	// the member is not ready yet, with how long it has waited: a member
	// of a cluster serves only once a quorum of its members is up, and
	// until then nothing else says why nothing happens.
	Waiting      func(waited time.Duration)
	WaitingEvery time.Duration
}

// Embedded is a running embedded etcd member.
type Embedded struct {
	etcd      *embed.Etcd
	endpoints []string
	closing   *atomic.Bool
	closeOnce sync.Once
}

// StartEmbedded starts an etcd member and waits until it serves clients.
// A member of a multi-member cluster is ready only once a quorum has
// started, so the members of a new cluster must be started concurrently.
func StartEmbedded(ctx context.Context, c EmbedConfig) (*Embedded, error) {
	if c.Dir == "" {
		return nil, fmt.Errorf("meta: embedded etcd: %w: empty data directory", ErrInvalid)
	}
	if err := checkDirFree(c.Dir); err != nil {
		return nil, err
	}
	if err := checkDB(c.Dir); err != nil {
		return nil, err
	}
	if c.Name == "" {
		c.Name = "terrace"
	}
	if c.TickMs == 0 {
		c.TickMs = DefaultTickMs
	}
	if c.ElectionMs == 0 {
		c.ElectionMs = DefaultElectionMs
	}
	if c.TickMs < 0 || c.ElectionMs < 0 {
		return nil, fmt.Errorf("meta: embedded etcd: %w: negative tick or election timeout", ErrInvalid)
	}
	closing := new(atomic.Bool)
	if c.Logger == nil {
		c.Logger = newQuietLogger(closing)
	}
	// A port we picked ourselves can be taken by someone else between our
	// probe and etcd's bind; then we pick again.
	for attempt := 0; ; attempt++ {
		e, picked, err := startOnce(ctx, c, closing)
		if err == nil {
			return e, nil
		}
		inUse := errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
		if !picked || attempt == 2 || !inUse {
			return nil, err
		}
	}
}

func startOnce(ctx context.Context, c EmbedConfig, closing *atomic.Bool) (_ *Embedded, picked bool, _ error) {
	client, pickedC, err := resolveAddr(c.ClientAddr)
	if err != nil {
		return nil, false, fmt.Errorf("meta: embedded etcd: client address: %w", err)
	}
	peer, pickedP, err := resolveAddr(c.PeerAddr)
	if err != nil {
		return nil, false, fmt.Errorf("meta: embedded etcd: peer address: %w", err)
	}
	if pickedP && c.InitialCluster != "" {
		return nil, false, fmt.Errorf("meta: embedded etcd: %w: a member of a multi-member cluster needs a fixed peer port", ErrInvalid)
	}
	picked = pickedC || pickedP
	scheme := "http"
	if c.TLS != nil {
		scheme = "https"
	}
	curl := url.URL{Scheme: scheme, Host: client}
	purl := url.URL{Scheme: scheme, Host: peer}

	cfg := embed.NewConfig()
	cfg.Name = c.Name
	cfg.Dir = c.Dir
	cfg.ListenClientUrls = []url.URL{curl}
	cfg.AdvertiseClientUrls = []url.URL{curl}
	cfg.ListenPeerUrls = []url.URL{purl}
	cfg.AdvertisePeerUrls = []url.URL{purl}
	cfg.InitialCluster = c.InitialCluster
	if c.TLS != nil {
		// Under TLS every member's peer URL is https; an operator who
		// wrote http:// in the cluster list meant the same members.
		cfg.InitialCluster = strings.ReplaceAll(cfg.InitialCluster, "http://", "https://")
	}
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = c.Name + "=" + purl.String()
	}
	cfg.InitialClusterToken = "terrace"
	cfg.TickMs = uint(c.TickMs)
	cfg.ElectionMs = uint(c.ElectionMs)
	// Only our own gRPC clients talk to it.
	cfg.EnableGRPCGateway = false
	// Progress and placement writes would otherwise grow the history
	// forever; watchers that fall further behind than this re-read.
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = "10m"
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(c.Logger)
	c.TLS.apply(cfg)

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, picked, fmt.Errorf("meta: starting embedded etcd %s in %s: %w", c.Name, c.Dir, err)
	}
	every := c.WaitingEvery
	if every <= 0 {
		every = 5 * time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	start := time.Now()
	for {
		select {
		case <-e.Server.ReadyNotify():
			return &Embedded{etcd: e, endpoints: []string{curl.String()}, closing: closing}, picked, nil
		case <-tick.C:
			if c.Waiting != nil {
				c.Waiting(time.Since(start).Round(time.Second))
			}
		case err := <-e.Err():
			abandon(e, closing)
			return nil, picked, fmt.Errorf("meta: embedded etcd %s failed while starting: %w", c.Name, err)
		case <-ctx.Done():
			abandon(e, closing)
			return nil, picked, fmt.Errorf("meta: embedded etcd %s not ready: %w", c.Name, ctx.Err())
		}
	}
}

// abandon stops a member that never became ready. etcd's Close alone
// waits for its client listeners to start serving, which they do only
// once the member is ready: a member of a cluster without a quorum (the
// other coordinators not started) then hung in Close, deaf to SIGTERM
// and SIGINT. Stopping the server first ends that wait (its stopping
// signal releases the listeners).
func abandon(e *embed.Etcd, closing *atomic.Bool) {
	closing.Store(true)
	e.Server.Stop()
	e.Close()
	closing.Store(false)
}

// resolveAddr defaults addr and replaces port 0 by a free port. Advertised
// URLs must name the real port, so etcd cannot be given port 0 itself.
func resolveAddr(addr string) (string, bool, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", false, err
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return "", false, fmt.Errorf("%w: bad port in %q", ErrInvalid, addr)
	} else if p != 0 {
		return addr, false, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", false, err
	}
	defer l.Close()
	_, port, _ = net.SplitHostPort(l.Addr().String())
	return net.JoinHostPort(host, port), true, nil
}

// quietCore logs etcd's errors to stderr, except those that are part of
// normal operation: every serving goroutine reports its listener closing
// as an error once Close has begun, and a fresh data directory makes the
// storage-version monitor fail once before it retries and succeeds.
type quietCore struct {
	zapcore.Core
	closing *atomic.Bool
}

func newQuietLogger(closing *atomic.Bool) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(zapcore.AddSync(os.Stderr)), zapcore.ErrorLevel)
	return zap.New(quietCore{core, closing})
}

func (c quietCore) With(f []zapcore.Field) zapcore.Core {
	return quietCore{c.Core.With(f), c.closing}
}

func (c quietCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.Level < zapcore.DPanicLevel && (c.closing.Load() || e.Message == "failed to update storage version") {
		return ce
	}
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

// Endpoints returns the member's client URLs, for Open.
func (e *Embedded) Endpoints() []string { return e.endpoints }

// Err reports errors that stop the member after it started, such as a
// failed listener.
func (e *Embedded) Err() <-chan error { return e.etcd.Err() }

// Close stops the member; closing it again does nothing. Its data stays
// in the data directory.
func (e *Embedded) Close() error {
	e.closeOnce.Do(func() {
		e.closing.Store(true)
		e.etcd.Close()
	})
	return nil
}
