package coord

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/internal/placement/tier"
	"github.com/terrace-ml/terrace/table"
)

// TestMachine runs the scenario files in testdata: each command is an
// event for the state machine, and its output is what the machine hands
// out (save, publish, replies, effects) and logs. After every command the
// harness checks the pieces' invariants and that no state version named
// was dropped. go test -run TestMachine -rewrite rewrites the expected
// output; read the diff.
func TestMachine(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := &harness{t: t}
		datadriven.RunTest(t, path, h.run)
	})
}

// harness drives one Machine as the driver would, with a fake store.
type harness struct {
	t       *testing.T
	m       *Machine
	cfg     Config
	now     time.Time
	out     strings.Builder
	nextID  uint64
	cmds    map[uint64]string // the command of each request
	waits   map[uint64]bool   // requests not answered yet
	saved   Saved             // what the store holds
	epoch   uint64            // the last epoch the store numbered
	rev     uint64            // the fake store's revision, with etcd
	etcd    bool              // number epochs by revision, as etcd does
	holding bool              // Ready is taken but not advanced until "release"
	// forceEpoch, if not 0, is the number the store gives the next epoch.
	forceEpoch uint64
	rd         *Ready // the Ready held
	blobs      map[StateRef]string
	probes     []Probe // probes asked for and not yet answered
	rows       int     // rows per partition, for the audit
	trained    map[[2]int][]span
}

// span is a run of rows recorded trained, by a rank.
type span struct{ from, to, rank int }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (h *harness) run(t *testing.T, td *datadriven.TestData) string {
	h.t = t
	h.out.Reset()
	if td.Cmd != "new" && h.m == nil {
		t.Fatalf("%s: no machine (start with new)", td.Pos)
	}
	if f, ok := inspections[td.Cmd]; ok {
		f(h, td)
		return h.out.String()
	}
	f, ok := events[td.Cmd]
	if !ok {
		t.Fatalf("%s: unknown command %q", td.Pos, td.Cmd)
	}
	first := h.nextID + 1
	f(h, td)
	for id := first; id <= h.nextID; id++ {
		h.cmds[id], h.waits[id] = td.Cmd, true
	}
	h.drive()
	for id := first; id <= h.nextID; id++ {
		if h.waits[id] && !h.holding {
			fmt.Fprintf(&h.out, "#%d waits\n", id)
		}
	}
	h.check()
	return h.out.String()
}

// events step the machine; the harness then drives what it hands out.
var events = map[string]func(h *harness, td *datadriven.TestData){
	"new": (*harness).newMachine,
	"join-server": func(h *harness, td *datadriven.TestData) {
		id := h.str(td, "id", "")
		h.m.Join(h.id(), api.Join{Role: api.RoleServer, ID: id, Addr: h.str(td, "addr", id+":1"), Incarnation: h.str(td, "inc", ""),
			Machine: h.str(td, "machine", ""), Class: h.class(td)})
	},
	"join-worker": func(h *harness, td *datadriven.TestData) {
		h.m.Join(h.id(), api.Join{Role: api.RoleWorker, ID: h.str(td, "id", ""), Addr: h.str(td, "addr", ""), Incarnation: h.str(td, "inc", ""),
			Machine: h.str(td, "machine", ""), Class: h.class(td)})
	},
	"switch-stage": func(h *harness, td *datadriven.TestData) {
		h.m.SwitchStage(h.id(), tier.Stage(h.int(td, "to", 1)), h.str(td, "reason", "test"))
	},
	"table": func(h *harness, td *datadriven.TestData) {
		h.m.CreateTable(h.id(), table.Spec{Name: h.str(td, "name", "w"), Width: h.int(td, "width", 1)})
	},
	"report": func(h *harness, td *datadriven.TestData) {
		h.m.Report(h.id(), h.int(td, "rank", 0), json.RawMessage(`{}`))
	},
	"acquire": func(h *harness, td *datadriven.TestData) {
		h.m.Acquire(h.id(), api.Acquire{Rank: h.int(td, "rank", 0), Pass: h.int(td, "pass", 0)})
	},
	"progress": (*harness).progress,
	"split": func(h *harness, td *datadriven.TestData) {
		h.m.Split(h.id(), api.Split{Rank: h.int(td, "rank", 0), Pass: h.int(td, "pass", 0), Partition: h.int(td, "part", 0), From: h.int(td, "from", 0), AnyFree: td.HasArg("any-free")})
	},
	"heartbeat": func(h *harness, td *datadriven.TestData) {
		if err := h.m.Heartbeat(h.int(td, "rank", 0), int64(h.int(td, "clock", 0))); err != nil {
			fmt.Fprintf(&h.out, "heartbeat: %v\n", err)
		}
	},
	"heartbeat-conn-closed": func(h *harness, td *datadriven.TestData) { h.m.HeartbeatConnClosed(h.int(td, "rank", 0)) },
	"leave":                 func(h *harness, td *datadriven.TestData) { h.m.Leave(h.id(), h.int(td, "rank", 0)) },
	"leave-server":          func(h *harness, td *datadriven.TestData) { h.m.LeaveServer(h.id(), h.str(td, "id", "")) },
	"synced": func(h *harness, td *datadriven.TestData) {
		v := uint64(h.int(td, "version", int(h.m.published.Version)))
		h.m.Synced(h.id(), api.Synced{From: h.str(td, "from", ""), Joiner: h.str(td, "joiner", ""), Version: v})
	},
	"rebuilt": func(h *harness, td *datadriven.TestData) {
		v := uint64(h.int(td, "version", int(h.m.published.Version)))
		h.m.Rebuilt(h.id(), api.Rebuilt{From: h.str(td, "from", ""), Version: v})
	},
	"server-failed": func(h *harness, td *datadriven.TestData) { h.m.ServerFailed(h.id(), h.str(td, "id", ""), "") },
	"report-loss": func(h *harness, td *datadriven.TestData) {
		h.m.ReportLoss(h.id(), api.LossReport{From: h.str(td, "from", ""), Epoch: uint64(h.int(td, "epoch", 0))})
	},
	"member-gone": func(h *harness, td *datadriven.TestData) {
		h.m.MemberGone(h.id(), h.str(td, "role", ""), h.str(td, "id", ""), h.str(td, "inc", ""))
	},
	"probed":     (*harness).probed,
	"checkpoint": func(h *harness, td *datadriven.TestData) { h.m.RequestCheckpoint(h.id(), td.HasArg("now")) },
	"checkpointed": func(h *harness, td *datadriven.TestData) {
		h.m.Checkpointed(h.id(), api.Checkpointed{From: h.str(td, "from", ""), Seq: uint64(h.int(td, "seq", 1)), Error: h.str(td, "error", "")})
	},
	"committed": func(h *harness, td *datadriven.TestData) {
		var err error
		if e := h.str(td, "error", ""); e != "" {
			err = fmt.Errorf("%s", e)
		}
		h.m.Committed(uint64(h.int(td, "seq", 1)), err)
	},
	"restored": func(h *harness, td *datadriven.TestData) {
		load := 0 // the load in progress, unless rewind= names another
		if r := h.m.st.Layout.Resume; r != nil {
			load = r.Rewind
		}
		h.m.Restored(h.id(), api.Checkpointed{From: h.str(td, "from", ""), Seq: uint64(h.int(td, "seq", 1)), Rewind: h.int(td, "rewind", load), Error: h.str(td, "error", "")})
	},
	"resume":  (*harness).resume,
	"rewound": (*harness).rewound,
	"tick": func(h *harness, td *datadriven.TestData) {
		d, err := time.ParseDuration(td.CmdArgs[0].Key)
		if err != nil {
			h.t.Fatalf("%s: %v", td.Pos, err)
		}
		h.now = h.now.Add(d)
		h.m.Tick(h.now)
	},
	"cancel": func(h *harness, td *datadriven.TestData) { h.m.Cancel(uint64(h.int(td, "req", 0))) },
	"hold":   func(h *harness, td *datadriven.TestData) { h.holding = true },
	"release": func(h *harness, td *datadriven.TestData) {
		h.holding, h.forceEpoch = false, uint64(h.int(td, "epoch", 0))
		h.advance()
	},
	"restore": (*harness).restore,
}

// inspections print without stepping.
var inspections = map[string]func(h *harness, td *datadriven.TestData){
	"pieces": func(h *harness, td *datadriven.TestData) { h.printPieces() },
	"stage": func(h *harness, td *datadriven.TestData) {
		stage, hist := h.m.Stage()
		fmt.Fprintf(&h.out, "stage %d\n", stage)
		for _, c := range hist {
			if c.Done.IsZero() { // a switch in progress, or abandoned
				fmt.Fprintf(&h.out, "%d -> %d not done: %s\n", c.From, c.To, c.Reason)
				continue
			}
			fmt.Fprintf(&h.out, "%d -> %d after %v: %s\n", c.From, c.To, c.Done.Sub(c.Started), c.Reason)
		}
	},
	"layout": func(h *harness, td *datadriven.TestData) { h.printLayout("layout", h.m.snapshot()) },
	"audit":  func(h *harness, td *datadriven.TestData) { h.audit() },
	"states": func(h *harness, td *datadriven.TestData) { h.printStates() },
	"status": func(h *harness, td *datadriven.TestData) { h.printStatus() },
	"lost":   func(h *harness, td *datadriven.TestData) { h.printLost() },
	"at-risk": func(h *harness, td *datadriven.TestData) {
		fmt.Fprintf(&h.out, "under-replicated %.1f%% of the ring\n", 100*h.m.Status().UnderReplicated)
	},
	"loss": func(h *harness, td *datadriven.TestData) {
		l := h.m.Loss()
		fmt.Fprintf(&h.out, "updates lost %d of %d at risk, %d reports, %d unreported\n", l.UpdatesLost, l.UpdatesLostBound, l.Reports, l.Unreported)
	},
}

func (h *harness) newMachine(td *datadriven.TestData) {
	timeout, err := time.ParseDuration(h.str(td, "timeout", "1s"))
	if err != nil {
		h.t.Fatal(err)
	}
	gap, err := time.ParseDuration(h.str(td, "gap", "0s"))
	if err != nil {
		h.t.Fatal(err)
	}
	h.cfg = Config{ProgressGap: gap, Servers: h.int(td, "servers", 1), Workers: h.int(td, "workers", 1), Partitions: h.int(td, "partitions", 2),
		Replication: h.int(td, "replication", 1), FailureTimeout: timeout, CheckpointDir: h.str(td, "ckpt-dir", ""),
		CheckpointEvery: h.int(td, "ckpt-every", 0), OnCopiesLost: CopiesLostPolicy(h.str(td, "on-copies-lost", "")), Stage: tier.Stage(h.int(td, "stage", 0)), StageReason: h.str(td, "stage-reason", ""), Logger: slog.New(slog.NewTextHandler(&h.out, &slog.HandlerOptions{ReplaceAttr: noTime}))}
	h.now, h.etcd, h.rows = t0, td.HasArg("etcd"), h.int(td, "rows", 100)
	h.saved, h.epoch, h.rd, h.holding, h.probes = Saved{}, 0, nil, false, nil
	h.blobs, h.trained, h.rev = map[StateRef]string{}, map[[2]int][]span{}, 100
	if h.cmds == nil {
		h.cmds, h.waits = map[uint64]string{}, map[uint64]bool{}
	}
	h.m = NewMachine(h.cfg, h.now)
}

func noTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

func (h *harness) class(td *datadriven.TestData) tier.Class {
	c, err := tier.ParseClass(h.str(td, "class", "reliable"))
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

func (h *harness) id() uint64 {
	h.nextID++
	return h.nextID
}

func (h *harness) str(td *datadriven.TestData, key, def string) string {
	for _, a := range td.CmdArgs {
		if a.Key == key {
			if len(a.Vals) == 0 {
				return "true"
			}
			return a.Vals[0]
		}
	}
	return def
}

func (h *harness) int(td *datadriven.TestData, key string, def int) int {
	s := h.str(td, key, "")
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		h.t.Fatalf("%s: %s=%s: %v", td.Pos, key, s, err)
	}
	return n
}

// progress reports on a piece as the driver does: state blobs are stored
// under the versions the machine gives out, then the report is stepped.
func (h *harness) progress(td *datadriven.TestData) {
	u := api.Update{Rank: h.int(td, "rank", 0), Pass: h.int(td, "pass", 0), Partition: h.int(td, "part", 0),
		Offset: h.int(td, "offset", 0), Clock: int64(h.int(td, "clock", 0)), Complete: td.HasArg("complete"),
		Lease: uint64(h.int(td, "lease", 0))}
	if s := h.str(td, "state", ""); s != "" {
		u.State, u.HasState = []byte(s), true
	}
	if td.HasArg("declined") {
		u.Cut = &api.Cut{Declined: true}
	} else if c := h.str(td, "cut", ""); c != "" {
		u.Cut = &api.Cut{At: h.int(td, "cut", 0)}
		if s := h.str(td, "tail", ""); s != "" {
			u.Cut.State, u.Cut.HasState = []byte(s), true
		}
	}
	head, tail, err := h.m.AllocStates(u)
	if err == nil {
		h.put(u.Partition, head, u.State)
		h.put(u.Partition, tail, cutState(u.Cut))
	}
	w := h.m.st.Passes[u.Pass] // kept: a pass that completes is forgotten
	grant, before := pieceOffset(w, u.Partition, func(pc Piece) bool {
		return !pc.Done && pc.Rank == u.Rank && (u.Lease == 0 || pc.Grant == u.Lease)
	})
	h.m.Progress(h.id(), u, head, tail)
	_, after := pieceOffset(w, u.Partition, func(pc Piece) bool { return grant != 0 && pc.Grant == grant })
	if before >= 0 && after > before {
		k := [2]int{u.Pass, u.Partition}
		h.trained[k] = append(h.trained[k], span{before, after, u.Rank})
	}
}

func (h *harness) put(p int, ver uint64, blob []byte) {
	if ver != 0 {
		h.blobs[StateRef{p, ver}] = string(blob)
	}
}

// pieceOffset returns the grant and offset of the piece of partition p
// that match picks; -1 if none.
func pieceOffset(w *Pass, p int, match func(Piece) bool) (uint64, int) {
	if w == nil || p < 0 || p >= len(w.Parts) {
		return 0, -1
	}
	if i := slices.IndexFunc(w.Parts[p], match); i >= 0 {
		return w.Parts[p][i].Grant, w.Parts[p][i].Offset
	}
	return 0, -1
}

func (h *harness) probed(td *datadriven.TestData) {
	id := h.str(td, "id", "")
	i := slices.IndexFunc(h.probes, func(p Probe) bool { return p.ID == id })
	if i < 0 {
		h.t.Fatalf("%s: no probe of %s pending", td.Pos, id)
	}
	p := h.probes[i]
	h.probes = slices.Delete(h.probes, i, i+1)
	h.m.Probed(p, h.str(td, "alive", "false") == "true")
}

// restore starts a new machine from the last state saved, as a standby
// that takes over does: what was not saved is lost, and so are the
// requests waiting.
func (h *harness) restore(td *datadriven.TestData) {
	if h.saved.State == nil {
		h.t.Fatalf("%s: nothing saved", td.Pos)
	}
	m, err := RestoreMachine(h.cfg, h.saved, h.epoch, h.now)
	if err != nil {
		h.t.Fatal(err)
	}
	h.m, h.rd, h.holding, h.probes = m, nil, false, nil
}

// savedPieces prints a checkpoint's pieces as the resume command takes
// them: partition/start/offset/end, /done if done, joined by +.
func savedPieces(ps []SavedPiece) string {
	var out []string
	for _, sp := range ps {
		s := fmt.Sprintf("%d/%d/%d/%s", sp.Partition, sp.Start, sp.Offset, endString(sp.End))
		if sp.Done {
			s += "/done"
		}
		out = append(out, s)
	}
	return strings.Join(out, "+")
}

// parsePieces reads what savedPieces prints ("open" for the end).
func (h *harness) parsePieces(td *datadriven.TestData, s string) []SavedPiece {
	var out []SavedPiece
	for _, f := range strings.Split(s, "+") {
		parts := strings.Split(f, "/")
		if len(parts) < 4 {
			h.t.Fatalf("%s: piece %q: want partition/start/offset/end", td.Pos, f)
		}
		var n [4]int
		for i, x := range parts[:4] {
			if i == 3 && x == "open" {
				n[i] = api.ToEnd
				continue
			}
			v, err := strconv.Atoi(x)
			if err != nil {
				h.t.Fatalf("%s: piece %q: %v", td.Pos, f, err)
			}
			n[i] = v
		}
		out = append(out, SavedPiece{Partition: n[0], Start: n[1], Offset: n[2], End: n[3], Done: len(parts) > 4 && parts[4] == "done"})
	}
	return out
}

// resume starts a new machine from a checkpoint: blob is the states of
// its partitions, p=blob,blob (pieces of one partition joined by +);
// pieces=, those of the pass in progress of one taken inside it (as the
// commit prints them).
func (h *harness) resume(td *datadriven.TestData) {
	h.m = NewMachine(h.cfg, h.now)
	counts, blobs := map[int]int{}, map[int][]string{}
	for _, a := range td.CmdArgs {
		if p, err := strconv.Atoi(a.Key); err == nil {
			blobs[p] = strings.Split(a.Vals[0], "+")
			counts[p] = len(blobs[p])
		}
	}
	r := Resumed{Dir: "ckpt", Seq: uint64(h.int(td, "seq", 1)), Pass: h.int(td, "pass", 0),
		Servers: strings.Split(h.str(td, "servers", "s0"), "+"), Partitions: h.cfg.Partitions, States: counts}
	if s := h.str(td, "pieces", ""); s != "" {
		r.InPass = &InPass{Pass: r.Pass + 1, Pieces: h.parsePieces(td, s)}
		if err := r.InPass.check(r.Pass, r.Partitions); err != nil {
			h.t.Fatalf("%s: %v", td.Pos, err)
		}
	}
	vers := h.m.Resume(r)
	for p, vs := range vers {
		for i, v := range vs {
			h.put(p, v, []byte(blobs[p][i]))
		}
	}
}

// rewound answers the machine's Rewind with the newest intact checkpoint
// as the driver reads it: seq, pass, servers and pieces as for resume;
// job= its job number (the cluster's job by default); none: there is
// none.
func (h *harness) rewound(td *datadriven.TestData) {
	if td.HasArg("none") {
		h.m.Rewound(Resumed{}, errors.New("no committed checkpoint"))
		return
	}
	r := Resumed{Dir: "ckpt", Seq: uint64(h.int(td, "seq", 1)), Pass: h.int(td, "pass", 0),
		Servers: strings.Split(h.str(td, "servers", "s0"), "+"), Partitions: h.cfg.Partitions,
		Tables: slices.Clone(h.m.st.Layout.Tables), JobNumber: uint64(h.int(td, "job", int(h.m.st.Layout.Job)+1))}
	if s := h.str(td, "pieces", ""); s != "" {
		r.InPass = &InPass{Pass: r.Pass + 1, Pieces: h.parsePieces(td, s)}
		if err := r.InPass.check(r.Pass, r.Partitions); err != nil {
			h.t.Fatalf("%s: %v", td.Pos, err)
		}
	}
	h.m.Rewound(r, nil)
}

// drive takes the machine's Ready, saves it and advances, unless holding.
func (h *harness) drive() {
	for !h.holding || h.rd == nil {
		rd, ok := h.m.Ready()
		if !ok {
			return
		}
		if rd.Save != nil {
			h.checkSave(rd.Save)
		}
		h.rd = &rd
		if h.holding {
			fmt.Fprintf(&h.out, "saving (held)\n")
			return
		}
		h.advance()
	}
}

// advance completes the held save and prints what the Ready releases.
func (h *harness) advance() {
	rd := h.rd
	if rd == nil {
		return
	}
	h.rd = nil
	var epoch uint64
	if rd.Save != nil {
		h.saved.Apply(rd.Save)
		h.rev += 7 // other writes come between
		if h.etcd && rd.Placement != nil {
			epoch = h.rev
		}
		if h.forceEpoch != 0 && rd.Placement != nil {
			epoch, h.forceEpoch = h.forceEpoch, 0
		}
	}
	if err := h.m.Advance(epoch); err != nil {
		fmt.Fprintf(&h.out, "advance: %v\n", err)
		return
	}
	if epoch != 0 {
		h.epoch = epoch
	}
	h.printReady(rd)
	h.drive()
}

func (h *harness) printReady(rd *Ready) {
	if rd.Save != nil {
		fmt.Fprintf(&h.out, "save\n")
	}
	if rd.Layout != nil {
		h.printLayout("publish", rd.Layout)
		h.checkLayout(rd.Layout)
	}
	for _, r := range rd.Replies {
		if r.ID != 0 {
			delete(h.waits, r.ID)
			fmt.Fprintf(&h.out, "reply #%d: %s\n", r.ID, describe(h.cmds[r.ID], r))
		}
	}
	for _, d := range rd.Drops {
		fmt.Fprintf(&h.out, "drop: partition %d version %d\n", d.Partition, d.Version)
		delete(h.blobs, d)
	}
	if c := rd.Commit; c != nil {
		fmt.Fprintf(&h.out, "commit: seq %d pass %d servers %v states %v\n", c.Seq, c.Pass, c.Servers, c.States)
		if ip := c.InPass; ip != nil {
			fmt.Fprintf(&h.out, "commit: inside pass %d: %s\n", ip.Pass, savedPieces(ip.Pieces))
		}
	}
	if rd.Rewind != nil {
		fmt.Fprintf(&h.out, "rewind: read the newest intact checkpoint under %s\n", rd.Rewind.Dir)
	}
	for _, p := range rd.Probes {
		fmt.Fprintf(&h.out, "probe: %s at %s\n", p.ID, p.Addr)
		h.probes = append(h.probes, p)
	}
	if rd.AllReported {
		fmt.Fprintf(&h.out, "all reported\n")
	}
}

// describe prints a reply to a request of command cmd.
func describe(cmd string, r Reply) string {
	switch {
	case r.Err != nil:
		return fmt.Sprintf("error %s: %v", api.CodeOf(r.Err), r.Err)
	case r.Layout != nil:
		return fmt.Sprintf("layout v%d", r.Layout.Version)
	case r.Grant.Done:
		return fmt.Sprintf("pass done, clock %d", r.Grant.Clock)
	case r.Grant.Lease != 0:
		g := r.Grant
		pc := Piece{Start: g.Start, End: g.End}
		return fmt.Sprintf("grant partition %d %s offset %d lease %d states %v", g.Partition, pc.String(), g.Offset, g.Lease, g.States)
	case r.Progress != (api.ProgressReply{}):
		s := "recorded, end " + endString(r.Progress.End)
		if r.Progress.State != 0 {
			s += fmt.Sprintf(", state %d", r.Progress.State)
		}
		if c := r.Progress.Cut; c != nil {
			s += fmt.Sprintf(", cut asked from row %d", c.From)
		}
		return s
	case r.Removed:
		return "removed"
	case cmd == "join-worker":
		return fmt.Sprintf("rank %d", r.Rank)
	case cmd == "checkpoint":
		return fmt.Sprintf("checkpoint %d will serve it", r.Seq)
	case cmd == "member-gone" || cmd == "server-failed":
		return "kept"
	case cmd == "acquire" || cmd == "split":
		return "nothing yet"
	}
	return "ok"
}

func endString(end int) string {
	if end == api.ToEnd {
		return "open"
	}
	return strconv.Itoa(end)
}

func (h *harness) printLayout(what string, l *layout.Layout) {
	ids := func(ss []ring.Server) []string {
		var out []string
		for _, s := range ss {
			out = append(out, s.ID)
		}
		return out
	}
	fmt.Fprintf(&h.out, "%s: v%d epoch %d (after %d) servers %v", what, l.Version, l.Epoch, l.PrevEpoch, ids(l.Servers))
	if len(l.Joining) > 0 {
		fmt.Fprintf(&h.out, " joining %v", ids(l.Joining))
	}
	if len(l.Leaving) > 0 {
		fmt.Fprintf(&h.out, " leaving %v", l.Leaving)
	}
	if l.Stage != 0 {
		fmt.Fprintf(&h.out, " stage %d", l.Stage)
	}
	if len(l.Backup) > 0 {
		fmt.Fprintf(&h.out, " backup %v", ids(l.Backup))
	}
	if len(l.Standby) > 0 {
		fmt.Fprintf(&h.out, " standby %v", ids(l.Standby))
	}
	if sw := l.Switch; sw != nil {
		fmt.Fprintf(&h.out, " switch %d->%d", sw.From, sw.To)
		if sw.Flush {
			fmt.Fprintf(&h.out, " flush")
		}
	}
	fmt.Fprintf(&h.out, " workers %d", l.Workers)
	if len(l.PeerAddrs) > 0 {
		fmt.Fprintf(&h.out, " peers %v", l.PeerAddrs)
	}
	if len(l.Finished) > 0 {
		fmt.Fprintf(&h.out, " finished %v", l.Finished)
	}
	if len(l.Tables) > 0 {
		fmt.Fprintf(&h.out, " tables %d", len(l.Tables))
	}
	if c := l.Checkpoint; c != nil && h.m.st.Checkpoint.MidPass != nil && h.m.st.Checkpoint.Seq == c.Seq {
		fmt.Fprintf(&h.out, " checkpoint %d inside pass %d", c.Seq, c.Pass+1)
	} else if c != nil {
		fmt.Fprintf(&h.out, " checkpoint %d after pass %d", c.Seq, c.Pass)
	}
	if c := l.Resume; c != nil {
		fmt.Fprintf(&h.out, " resume %d", c.Seq)
		if c.Rewind > 0 {
			fmt.Fprintf(&h.out, " rewind %d", c.Rewind)
		}
	}
	if l.Ready {
		fmt.Fprintf(&h.out, " ready")
	}
	fmt.Fprintln(&h.out)
}

func (h *harness) printPieces() {
	fmt.Fprintf(&h.out, "done before pass %d\n", h.m.st.DoneBefore)
	for _, e := range h.m.passNumbers() {
		for p, pcs := range h.m.st.Passes[e].Parts {
			fmt.Fprintf(&h.out, "pass %d partition %d:", e, p)
			for _, pc := range pcs {
				fmt.Fprintf(&h.out, " %s@%d", pc.String(), pc.Offset)
				switch {
				case pc.Done:
					fmt.Fprintf(&h.out, " done")
				case pc.Rank >= 0:
					fmt.Fprintf(&h.out, " rank %d", pc.Rank)
				default:
					fmt.Fprintf(&h.out, " free")
				}
				if len(pc.States) > 0 {
					fmt.Fprintf(&h.out, " states %v", pc.States)
				}
				if pc.Cut != nil {
					fmt.Fprintf(&h.out, " cut asked by %d from %d", pc.Cut.By, pc.Cut.From)
				}
				fmt.Fprintf(&h.out, ";")
			}
			fmt.Fprintln(&h.out)
		}
	}
}

func (h *harness) printStates() {
	for _, p := range sortedKeys(h.m.st.PartStates) {
		var blobs []string
		for _, v := range h.m.st.PartStates[p] {
			blobs = append(blobs, fmt.Sprintf("%d=%q", v, h.blobs[StateRef{p, v}]))
		}
		fmt.Fprintf(&h.out, "partition %d: %s\n", p, strings.Join(blobs, " "))
	}
}

// audit prints, for every pass and partition trained, whether the rows
// recorded trained cover [0, rows) exactly once.
func (h *harness) audit() {
	keys := make([][2]int, 0, len(h.trained))
	for k := range h.trained {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]int) int { return a[0]*1000 + a[1] - b[0]*1000 - b[1] })
	for _, k := range keys {
		count := make([]int, h.rows)
		var by []string
		spans := slices.Clone(h.trained[k])
		slices.SortStableFunc(spans, func(a, b span) int { return a.from - b.from })
		for _, s := range spans {
			for r := s.from; r < s.to && r < h.rows; r++ {
				count[r]++
			}
			by = append(by, fmt.Sprintf("[%d,%d) by %d", s.from, s.to, s.rank))
		}
		verdict := "exactly once"
		if i := slices.IndexFunc(count, func(c int) bool { return c != 1 }); i >= 0 {
			verdict = fmt.Sprintf("row %d recorded %d times", i, count[i])
		}
		fmt.Fprintf(&h.out, "pass %d partition %d: %s: %s\n", k[0], k[1], verdict, strings.Join(by, ", "))
	}
}

func sortedKeys[V any](m map[int]V) []int {
	var ks []int
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
