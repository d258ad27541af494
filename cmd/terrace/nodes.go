package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/control/auth"
	"github.com/terrace-ml/terrace/internal/control/coord"
	"github.com/terrace-ml/terrace/internal/control/coordha"
	"github.com/terrace-ml/terrace/internal/dataplane/transport"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/internal/server"
)

func coordinatorCmd() *cobra.Command {
	var o coord.Options
	var ha coordha.Config
	var listen, reportPath, eventsPath, etcd, logLevel, dashListen, onCopiesLost string
	var exitWhenDone, inMemory bool
	var sec securityFlags
	var tiers coordTierFlags
	cmd := &cobra.Command{
		Use:   "coordinator",
		Short: "Run a coordinator: admits servers and workers, leases data, publishes the layout; replicas fail over through etcd",
		Long: `The coordinator keeps its state in etcd: by default in an etcd member it embeds
(data in --etcd-dir), or in an external cluster (--etcd). Several coordinators
form one replicated coordinator: give each the same --etcd endpoints, or let
them form their own etcd cluster with --etcd-cluster. One leads and serves;
the others wait, and the first to win the election after the leader fails
restores its state and takes over. Clients take every coordinator's
address, comma-separated.`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return nil
			case cmd.Flags().Changed("resume"):
				// train --resume takes the directory; the coordinator's
				// --resume is a switch (cobra said: unknown command "DIR").
				return fmt.Errorf("unexpected argument %q: the coordinator's --resume takes no directory, it resumes from --checkpoint-dir (--checkpoint-dir %s --resume)", args[0], args[0])
			}
			return fmt.Errorf("unexpected argument %q: the coordinator takes flags only", args[0])
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			class, err := tiers.apply(&o)
			if err != nil {
				return err
			}
			for _, f := range []string{"etcd", "etcd-dir", "etcd-client", "etcd-peer", "etcd-cluster", "etcd-prefix"} {
				if inMemory && cmd.Flags().Changed(f) {
					return fmt.Errorf("--%s with --in-memory: an in-memory coordinator keeps no state in etcd", f)
				}
			}
			if err := checkCoordinatorCluster(o.Servers, o.Workers, o.Replication, o.Stage != 0); err != nil {
				return err
			}
			if err := checkCoordination(o.Partitions, o.FailureTimeout); err != nil {
				return err
			}
			if err := checkCheckpointFlags(o.CheckpointDir, o.CheckpointEvery, o.CheckpointKeep, o.Resume); err != nil {
				return err
			}
			if o.OnCopiesLost, err = checkOnCopiesLost(onCopiesLost, o.CheckpointDir); err != nil {
				return err
			}
			o.ExitWhenDone = exitWhenDone
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			log := newLogger(logLevel)
			nw, err := sec.coordinator(listen, &o, &ha, log)
			if err != nil {
				return err
			}
			var view *dashView
			if dashListen != "" {
				view = &dashView{}
				addr, err := serveDashView(ctx, dashListen, view, log)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "terrace coordinator: dashboard (read-only, plain HTTP) on http://%s/\n", addr)
			}
			// A replica may lead more than once (it steps down when its
			// etcd session lapses and may win again): follow the newest.
			terms := make(chan *coord.Coordinator, 4)
			led := false
			ready := func(c *coord.Coordinator, addr string) {
				if led {
					fmt.Fprintf(cmd.OutOrStdout(), "terrace coordinator leading again on %s, from its saved state\n", addr)
				} else {
					fmt.Fprintln(cmd.OutOrStdout(), leadBanner(addr, o, c.JobStatus(), exitWhenDone))
					if o.Replication > o.Servers {
						fmt.Fprintf(cmd.OutOrStdout(), "terrace coordinator: each key on every server until %d are on the ring (--replication %d): chains grow as servers join\n", o.Replication, o.Replication)
					}
				}
				led = true
				terms <- c
			}
			errc := make(chan error, 1)
			go func() {
				if inMemory {
					errc <- node.RunCoordinator(ctx, node.CoordinatorConfig{Listen: listen, Options: o, Logger: log, Ready: ready, Network: nw, Class: class})
					return
				}
				ha.Listen, ha.Options, ha.Logger, ha.Ready = listen, o, log, ready
				ha.SteppedDown = func() { terms <- nil }
				ha.Standby = func(leader string) {
					fmt.Fprintf(cmd.OutOrStdout(), "terrace coordinator standing by: %s leads, and this one takes over if it fails\n", leader)
				}
				if etcd != "" {
					ha.Endpoints = strings.Split(etcd, ",")
				}
				errc <- coordha.Run(ctx, ha)
			}()
			var done <-chan struct{}
			var cur *coord.Coordinator
			var job uint64 // the number of the job whose end done tells
			var shown jobProgress
			var span jobSpan
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case cur = <-terms:
					if view != nil {
						view.lead(cur)
					}
					if cur == nil {
						done = nil // stepped down: the next term tells
						continue
					}
					st := cur.JobStatus()
					shown.lead(cmd.OutOrStdout(), st)
					job = st.Number
					if st.Done && st.Job != nil && !exitWhenDone {
						// It ended under an earlier leader, which told it
						// (and leadBanner says so): wait for the next.
						// Waiting for it, a coordinator started again
						// between jobs told the next one's end as this
						// one's ("job 1 done: 4 pass(es)", "ready for job
						// 2", "job 2 done").
						job++
					}
					done = cur.JobEnded(job)
				case <-tick.C:
					if cur != nil {
						shown.show(cmd.OutOrStdout(), cur.JobStatus())
					}
				case <-done:
					done = nil
					st := cur.JobStatus()
					shown.show(cmd.OutOrStdout(), st)
					fmt.Fprintf(cmd.OutOrStdout(), "terrace coordinator: job %d done: %d pass(es) trained; every worker reported or is gone\n", job, st.PassesDone)
					rep := newJobReport(st, flagValues(cmd.Flags(), func(string) bool { return true }), cur.Reports())
					var events []api.Event
					events, rep.History = span.take(ctx, cur)
					if err := writeReport(reportPath, rep); err != nil {
						return err
					}
					if err := writeReport(eventsPath, events); err != nil {
						return err
					}
					if exitWhenDone {
						// Servers follow the layout that says the cluster
						// ends; give their long-polls a moment to get it.
						go func() {
							select {
							case <-time.After(endLinger):
							case <-ctx.Done():
							}
							cancel()
						}()
					} else {
						// The cluster stays up: a submission starts the next job.
						job++
						done = cur.JobEnded(job)
						fmt.Fprintf(cmd.OutOrStdout(), "terrace coordinator: ready for job %d: terrace submit JOB.yaml, then start its workers\n", job)
					}
				case err := <-errc:
					if err == nil && cur != nil && done != nil && cmd.Context().Err() != nil {
						switch js := cur.JobStatus(); {
						case js.Done:
							// Between jobs: "during job 2, 150 passes done"
							// read as if job 2 had run.
							fmt.Fprintf(cmd.OutOrStdout(), "terrace coordinator: stopped after job %d was done, before another was submitted: %s\n", js.Number, whereStateIs(inMemory, etcd, ha.Embed.Dir, ha.Embed.InitialCluster))
						case js.Job == nil:
							// "during job 1, 0 pass(es) done", of a job
							// nobody had submitted.
							fmt.Fprintf(cmd.OutOrStdout(), "terrace coordinator: stopped before a job was submitted: %s\n", whereStateIs(inMemory, etcd, ha.Embed.Dir, ha.Embed.InitialCluster))
						default:
							fmt.Fprintf(cmd.OutOrStdout(), "terrace coordinator: stopped during job %d, %d pass(es) done: %s\n", job, js.PassesDone, whereStateIs(inMemory, etcd, ha.Embed.Dir, ha.Embed.InitialCluster))
						}
					}
					return err
				}
			}
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&listen, "listen", "127.0.0.1:7070", "address for the HTTP control plane")
	fs.IntVar(&o.Servers, "servers", 2, "servers to wait for")
	fs.IntVar(&o.Workers, "workers", 2, "workers to wait for")
	fs.IntVar(&o.Partitions, "partitions", 0, "data partitions (4 per worker if 0)")
	fs.IntVar(&o.Replication, "replication", 2, "servers holding each key slot (k); without --stage it may exceed --servers, and chains grow to k as servers join")
	fs.BoolVar(&o.Account, "account", false, "workers keep the examples account: one more push per minibatch, for the rows each pass trained more or fewer times than once (terrace status, /metrics)")
	fs.DurationVar(&o.FailureTimeout, "failure-timeout", coord.DefaultFailureTimeout, "declare a node dead after this long without a heartbeat or an answer to pings; also the lease of its etcd registration")
	fs.StringVar(&reportPath, "report", "", "write the workers' reports to this JSON file once all have reported (each job's replaces the last's)")
	fs.StringVar(&eventsPath, "events", "", "write the job's event timeline to this JSON file once all workers have reported, each job's replacing the last's (for terrace plot)")
	fs.BoolVar(&exitWhenDone, "exit-when-done", false, "end the cluster with its job: once every worker has reported, the coordinator and its servers exit 0")
	fs.StringVar(&ha.ID, "id", "", "this coordinator's name in the election (host name and pid if empty)")
	fs.StringVar(&etcd, "etcd", "", "endpoints of an external etcd cluster, comma-separated (default: embed a member)")
	fs.StringVar(&ha.Embed.Dir, "etcd-dir", "", "data directory of the embedded etcd member (a temporary directory if empty)")
	fs.StringVar(&ha.Embed.ClientAddr, "etcd-client", "127.0.0.1:0", "client address of the embedded etcd member")
	fs.StringVar(&ha.Embed.PeerAddr, "etcd-peer", "127.0.0.1:0", "peer address of the embedded etcd member (fixed when --etcd-cluster is set)")
	fs.StringVar(&ha.Embed.InitialCluster, "etcd-cluster", "", "name=http://peer,... of every embedded member, for coordinators that form their own etcd cluster (each with --id set to its name)")
	fs.StringVar(&ha.Prefix, "etcd-prefix", "/terrace", "key prefix, to share an etcd cluster between Terrace clusters")
	fs.BoolVar(&inMemory, "in-memory", false, "keep the state in memory only: no etcd, no failover")
	fs.StringVar(&o.CheckpointDir, "checkpoint-dir", "", "directory for durable cluster checkpoints (shared by the servers)")
	fs.IntVar(&o.CheckpointEvery, "checkpoint-every", 0, "take a checkpoint after every N training passes (0: never)")
	fs.IntVar(&o.CheckpointKeep, "checkpoint-keep", defaultCheckpointKeep, "after each checkpoint, remove those older than the newest N (0: keep every one)")
	fs.BoolVar(&o.Resume, "resume", false, "start from the newest committed checkpoint in --checkpoint-dir")
	fs.StringVar(&onCopiesLost, "on-copies-lost", onCopiesLostAuto, onCopiesLostUsage)
	logLevelVar(fs, &logLevel, "warn")
	fs.StringVar(&dashListen, "dashboard-listen", "", "also serve the dashboard read-only on this address, plain HTTP (for a browser without a client certificate under --tls-dir; keep it on loopback and tunnel to it)")
	sec.register(fs, true)
	tiers.register(fs)
	addConfigFlag(cmd)
	return cmd
}

// leadBanner is the first line of a coordinator that leads: what it does
// now. One started again on its --etcd-dir after a job said it was
// "waiting for 3 server(s) and 2 worker(s)", whose servers had joined
// long before and whose job was done.
func leadBanner(addr string, o coord.Options, st api.JobStatus, exitWhenDone bool) string {
	head := "terrace coordinator listening on " + addr
	switch {
	case st.Job != nil && st.Done && exitWhenDone:
		return fmt.Sprintf("%s, from its saved state: job %d was done before this coordinator led; ending the cluster (--exit-when-done)", head, st.Number)
	case st.Job != nil && st.Done:
		return fmt.Sprintf("%s, from its saved state: job %d was done before this coordinator led; ready for job %d: terrace submit JOB.yaml, then start its workers", head, st.Number, st.Number+1)
	case st.Job != nil:
		return fmt.Sprintf("%s, from its saved state: job %d under way, %d pass(es) of %d done, %d server(s) on the ring", head, st.Number, st.PassesDone, st.Job.Passes, len(st.Servers))
	case len(st.Servers) > 0:
		return fmt.Sprintf("%s, from its saved state: %d server(s) joined, waiting for %d server(s) and %d worker(s) in all", head, len(st.Servers), o.Servers, o.Workers)
	}
	return fmt.Sprintf("%s, waiting for %d server(s) and %d worker(s)", head, o.Servers, o.Workers)
}

func serverCmd() *cobra.Command {
	var cfg node.ServerConfig
	var notices noticeFlags
	var machine machineFlags
	var logLevel string
	var statsEvery time.Duration
	var sec securityFlags
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run a parameter server that joins the coordinator",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if err := checkAdvertise(cfg.Advertise); err != nil {
				return err
			}
			if cfg.Machine, cfg.Class, err = machine.parse(); err != nil {
				return err
			}
			if cfg.Network, err = machine.network(); err != nil {
				return err
			}
			if cfg.ID == "" {
				h, _ := os.Hostname()
				cfg.ID = fmt.Sprintf("server-%s-%d", h, os.Getpid())
			}
			cfg.Logger = newLogger(logLevel)
			if cfg.Network, cfg.Token, err = sec.node(auth.RoleServer, cfg.Network, cfg.Logger); err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			cfg.Notices = notices.watch(ctx)
			cfg.Metrics.Ready = func(addr string) {
				fmt.Fprintf(cmd.OutOrStdout(), "terrace server %s metrics on %s\n", cfg.ID, node.MetricsURL(cfg.Network, addr))
			}
			cfg.Ready = func(s *server.Server) {
				fmt.Fprintf(cmd.OutOrStdout(), "terrace server %s joined %s\n", cfg.ID, cfg.Coordinator)
				if statsEvery > 0 {
					go func() {
						t := time.NewTicker(statsEvery)
						defer t.Stop()
						for {
							select {
							case <-t.C:
								b, _ := json.Marshal(s.Stats())
								fmt.Fprintf(cmd.OutOrStdout(), "stats %s\n", b)
							case <-ctx.Done():
								return
							}
						}
					}()
				}
			}
			err = node.RunServer(ctx, cfg)
			if cause := context.Cause(cmd.Context()); err == nil && cause != nil {
				// Ctrl-C ends a server at once: it exited 0 saying nothing,
				// and the coordinator took it as failed.
				fmt.Fprintf(cmd.ErrOrStderr(), "terrace: server %s stopped (%v): left at once, not drained; the coordinator takes it as failed (SIGTERM drains)\n", cfg.ID, cause)
			}
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&cfg.ID, "id", "", "node ID (host name and pid if empty)")
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:0", "data-plane address to listen on")
	fs.StringVar(&cfg.Advertise, "advertise", "", "address workers should dial (the listen address if empty)")
	fs.StringVar(&cfg.Coordinator, "coordinator", "127.0.0.1:7070", "coordinator address")
	fs.DurationVar(&cfg.JoinTimeout, "join-timeout", node.DefaultJoinTimeout, "give up if the coordinator cannot be reached within this time")
	logLevelVar(fs, &logLevel, "info")
	fs.DurationVar(&statsEvery, "stats-every", 0, "print server statistics as JSON at this interval (0: never)")
	sec.register(fs, false)
	fs.StringVar(&cfg.Metrics.Listen, "metrics-listen", "127.0.0.1:0", "address to serve Prometheus /metrics on (port 0: any; empty: none)")
	notices.register(fs)
	machine.register(fs)
	addConfigFlag(cmd)
	return cmd
}

// workerFlags are the flags and set-up that worker and drill-worker share.
type workerFlags struct {
	a                    appFlags
	notices              noticeFlags
	cfg                  node.WorkerConfig
	logLevel, reportPath string
	sec                  securityFlags
	machine              machineFlags
	peers                peerFlags
	// ports holds the fixed ports setup claimed until the worker's own
	// servers take them; its caller lets go of any left once done.
	ports *transport.Held
}

func (w *workerFlags) register(fs *pflag.FlagSet) {
	w.a.register(fs)
	fs.StringVar(&w.cfg.ID, "id", "", "node ID (host name and pid if empty)")
	fs.StringVar(&w.cfg.Coordinator, "coordinator", "127.0.0.1:7070", "coordinator address")
	fs.DurationVar(&w.cfg.JoinTimeout, "join-timeout", node.DefaultJoinTimeout, "give up if the coordinator or servers cannot be reached within this time")
	fs.IntVar(&w.cfg.Rejoins, "rejoins", node.DefaultRejoins, "times to join again as a new worker after the coordinator declared this one dead while it ran (paused or starved longer than the failure timeout); 0: exit 1 instead")
	logLevelVar(fs, &w.logLevel, "warn")
	fs.StringVar(&w.reportPath, "report", "", "write this worker's JSON report to this file")
	w.sec.register(fs, false)
	fs.StringVar(&w.cfg.Metrics.Listen, "metrics-listen", "127.0.0.1:0", "address to serve Prometheus /metrics on (port 0: any; empty: none)")
	w.notices.register(fs)
	w.machine.register(fs)
	w.peers.register(fs)
}

// setup fills in the worker's configuration from the flags: its machine,
// network (an emulated link, TLS over it when asked), token, ID and logger.
// It runs before the worker first talks to the coordinator.
func (w *workerFlags) setup() error {
	// The values given, before any wait for the coordinator; the job
	// they make is compared with the cluster's later (resolveJob).
	if err := w.a.checkFlags(); err != nil {
		return err
	}
	if w.cfg.Rejoins < 0 {
		return fmt.Errorf("--rejoins %d: need 0 or more", w.cfg.Rejoins)
	}
	if err := w.peers.check(); err != nil {
		return err
	}
	var err error
	if w.cfg.Machine, w.cfg.Class, err = w.machine.parse(); err != nil {
		return err
	}
	base, err := w.machine.network()
	if err != nil {
		return err
	}
	// Fixed local ports are claimed before the worker submits its flags'
	// job: one already in use failed only after, leaving a job no worker
	// trains, which refused the next worker's flags. They are held, not
	// tried and let go, so that no process takes one in between.
	w.ports = transport.NewHeld(base)
	w.cfg.Network = w.ports
	if err := holdPort(w.ports, "--metrics-listen", w.cfg.Metrics.Listen); err != nil {
		return err
	}
	if err := holdPort(w.ports, "--peer-addr", w.peers.addr); err != nil {
		w.ports.Close()
		return err
	}
	if w.cfg.ID == "" {
		h, _ := os.Hostname()
		w.cfg.ID = fmt.Sprintf("worker-%s-%d", h, os.Getpid())
	}
	w.cfg.Logger = newLogger(w.logLevel)
	if w.cfg.Network, w.cfg.Token, err = w.sec.node(auth.RoleWorker, w.cfg.Network, w.cfg.Logger); err != nil {
		w.ports.Close()
		return err
	}
	return nil
}

// run runs job as a worker until it ends, draining on a notice; setup
// must have run.
func (w *workerFlags) run(ctx context.Context, job node.Job) (any, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.cfg.Notices = w.notices.watch(ctx)
	job, done, err := w.peers.start(ctx, &w.cfg, w.a.seed, job)
	if err != nil {
		return nil, err
	}
	defer done()
	return node.RunWorker(ctx, w.cfg, job)
}

// holdPort claims addr, flag's value, on ports when it names a fixed
// port, and refuses it when something on this host already listens
// there. An empty address or port 0 (any) holds nothing; a malformed one
// is left to the listen itself, which names it.
func holdPort(ports *transport.Held, flag, addr string) error {
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "0" {
		return nil
	}
	if err := ports.Hold(addr); err != nil {
		return fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	return nil
}

func workerCmd() *cobra.Command {
	var w workerFlags
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a worker that joins the coordinator and trains an application",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := w.setup(); err != nil {
				return err
			}
			defer w.ports.Close()
			// Waiting for the coordinator or the cluster's job, a worker
			// holds nothing: SIGTERM ends the wait (it killed the worker
			// silently, exit 143, before its drain watched for it).
			wctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM)
			job, err := w.workerJob(wctx, cmd.OutOrStdout())
			terminated := wctx.Err() != nil && cmd.Context().Err() == nil
			stop()
			if terminated {
				return node.ErrDrained
			}
			if err != nil {
				return err
			}
			w.cfg.Metrics.Ready = func(addr string) {
				fmt.Fprintf(cmd.OutOrStdout(), "terrace worker metrics on %s\n", node.MetricsURL(w.cfg.Network, addr))
			}
			rep, err := w.run(cmd.Context(), job)
			if err != nil {
				return err
			}
			return writeReport(w.reportPath, rep)
		},
	}
	w.register(cmd.Flags())
	addConfigFlag(cmd)
	return cmd
}

// jobSpan cuts the cluster's timeline and samples to one job's, those
// after the jobs before, as --report holds one job's passes. Written whole,
// a second job's --events held the first's too, and terrace plot drew the
// first job's faults and stage switches against the second's passes, each
// placed by the first job's event for a pass of its number.
type jobSpan struct {
	after uint64    // the last event of the jobs before
	from  time.Time // the last sample of the jobs before
}

// take returns the job's events and samples, and moves the span past
// them.
func (s *jobSpan) take(ctx context.Context, c *coord.Coordinator) ([]api.Event, []api.Sample) {
	events := c.Events(ctx, s.after, false)
	history := slices.DeleteFunc(c.History(), func(x api.Sample) bool { return !x.Time.After(s.from) })
	if n := len(events); n > 0 {
		s.after = events[n-1].Seq
	}
	if n := len(history); n > 0 {
		s.from = history[n-1].Time
	}
	return events, history
}

// whereStateIs tells a coordinator stopped mid-job how the cluster can go
// on: from the state it saved, where it saved it (a stop said nothing).
// One of the coordinators that form their own etcd cluster (members, the
// --etcd-cluster list) was told to start again for the cluster to go on,
// or that its state was gone, while another already led it.
func whereStateIs(inMemory bool, etcd, etcdDir, members string) string {
	switch {
	case members != "":
		n := len(strings.Split(members, ","))
		return fmt.Sprintf("the other coordinators of --etcd-cluster hold its state, and one of them leads the cluster on while %d of the %d are up", n/2+1, n)
	case inMemory:
		return "an in-memory coordinator keeps no state: its servers and workers cannot go on without it"
	case etcd != "":
		return "its state is in etcd at " + etcd + ": a coordinator started against it goes on"
	case etcdDir != "":
		return "its state is in --etcd-dir " + etcdDir + ": start the coordinator again with it, and the cluster goes on"
	}
	return "its embedded etcd's temporary directory is removed with it, and so is its state (give --etcd-dir to keep it; a checkpoint resumes with --resume)"
}

// checkAdvertise refuses an --advertise that workers could not dial: it
// was taken into the layout, and every worker then failed to reach the
// server ("missing port in address") until its join timeout.
func checkAdvertise(addr string) error {
	if addr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--advertise %s: want HOST:PORT, the address workers dial: %w", addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 || host == "" {
		return fmt.Errorf("--advertise %s: want HOST:PORT with a host and a port from 1 to 65535, the address workers dial", addr)
	}
	return nil
}
