package sim

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/ring"
	"github.com/terrace-ml/terrace/internal/placement/tier"
	"github.com/terrace-ml/terrace/internal/server"
	"github.com/terrace-ml/terrace/keyspace"
)

// SwitchStage asks the coordinator for a live switch to stage To (issue
// 11, Config.Stage): no process starts or stops, and no acknowledged
// update may be lost. A switch the coordinator refuses (another is in
// progress) is noted and skipped.
type SwitchStage struct {
	To tier.Stage
}

func (f SwitchStage) String() string { return fmt.Sprintf("switch to stage %d", f.To) }

func (f SwitchStage) Apply(ctx context.Context, c *Cluster) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c.Note("FAULT switch to stage %d", f.To)
	if _, err := api.NewClient(c.coordAddr, c.net.Host("stage-switcher")).SwitchStage(cctx, f.To, "simulation"); err != nil {
		c.Note("skip %v: %v", f, err)
	}
}

// ledgerCount waits, after a fallback, until the BackupPS's loss ledgers
// have reported (their grace for re-sends, in fake time), and returns
// what the coordinator counted.
func (c *Cluster) ledgerCount(ctx context.Context) api.Loss {
	if c.cfg.Stage == 0 || c.coord == nil {
		return api.Loss{}
	}
	var last time.Time
	for _, h := range c.coord.StageStatus().History {
		if strings.HasPrefix(h.Reason, "revocation") {
			last = h.Started
		}
	}
	if !last.IsZero() {
		t := time.NewTimer(time.Until(last.Add(server.DefaultFallbackGrace + time.Second)))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return c.coord.StageStatus().Loss
}

// The kinds of violation of tiers of reliability.
const (
	KindLedger = "the loss ledgers' count differs from the simulation's"
	KindNotice = "an ActivePS outlived a notice long enough to leave"
)

// NoticeEnough is a notice that must lose nothing: as long as a flush. In
// the simulation the flush is the 2|3 → 1 switch, which copies the whole
// model (1,500 counters and the hot ones) in well under a second of fake
// time; twice that covers the coordinator's failure to learn of the
// notices at once.
const NoticeEnough = 2 * time.Second

// checkNotice, as a revocation with notice runs out, reports each server
// of hit still heading slots as an ActivePS: the notice was long enough
// for the cluster to move to stage 1 without loss (docs/design/tiers.md,
// "With notice"), so killing it now loses what it holds of the last round.
func (c *Cluster) checkNotice(f Revoke, hit []*Node) {
	if c.cfg.Stage == 0 || f.Notice < NoticeEnough {
		return
	}
	lay := c.Layout()
	if lay.CurrentStage() == tier.Stage1 && (lay.Switch == nil || lay.Switch.From == tier.Stage1) {
		return
	}
	for _, n := range hit {
		if n.Role == RoleServer && slices.ContainsFunc(lay.Servers, func(s ring.Server) bool { return s.ID == n.ID }) {
			sw := "no switch in progress"
			if lay.Switch != nil {
				sw = fmt.Sprintf("switch %d -> %d in progress", lay.Switch.From, lay.Switch.To)
			}
			c.Violate(KindNotice, "%s still an ActivePS of stage %d (%s, layout v%d) when its notice of %v ran out",
				n.ID, lay.CurrentStage(), sw, lay.Version, f.Notice)
		}
	}
}

// LedgerCounts compares, with tiers, the acknowledged pushes the
// simulation found lost (ExactlyOnce's expected losses, so it must run
// after ExactlyOnce) with what the BackupPS's loss ledgers counted at
// fallbacks, as the coordinator summed them (docs/design/tiers.md, I3).
//
// When every push is one key (Counters.HotOnly), each rank's hot counter
// is its pushes, and for each rank the ledgers' count l, the simulation's
// s and the rank's pushes in flight when it died u satisfy s <= l <= s +
// u: a push the ActivePS allowed whose acknowledgement never reached its
// dead worker is lost by the ledgers' account, not by the book's; for a
// rank that never died with a push in flight, l = s exactly. With pushes
// of many keys the ledgers count parts, each of one to KeysPerStep + 1
// keys, and only the totals are bounded.
type LedgerCounts struct{}

func (LedgerCounts) Check(ctx context.Context, c *Cluster) []Violation {
	w, ok := c.workload.(Counters)
	if c.cfg.Stage == 0 || !ok {
		return nil
	}
	w = w.withDefaults()
	led := c.ledgerCount(ctx)
	unc := c.book.Uncertain()
	c.mu.Lock()
	lost, total := maps.Clone(c.lossKeys), c.lossIncs
	c.mu.Unlock()
	byRank := led.ByWorker[CountersTable]
	var bad []string
	if w.HotOnly {
		ranks := map[int]bool{}
		for r := range byRank {
			ranks[r] = true
		}
		for k := range lost {
			ranks[int((k-w.HotKey(0))/keyspace.SlotSize)] = true
		}
		for _, r := range slices.Sorted(maps.Keys(ranks)) {
			l, s, u := byRank[r], lost[w.HotKey(r)], unc[w.HotKey(r)]
			// A ledger gone before its report (Unreported) leaves the
			// count short: then it is a lower bound.
			if l < s && led.Unreported == 0 || l > s+u {
				bad = append(bad, fmt.Sprintf("rank %d: the ledgers count %d pushes lost, the simulation %d (%d in flight when it died)", r, l, s, u))
			}
		}
	} else {
		parts := int64(w.KeysPerStep + 1)
		var inflight int64
		for _, n := range unc {
			inflight += n
		}
		l := led.ByTable[CountersTable]
		if total > parts*l && led.Unreported == 0 || l > total+inflight+parts*c.book.InFlight() {
			bad = append(bad, fmt.Sprintf("the ledgers count %d parts lost, the simulation %d increments (parts of up to %d keys; %d increments in flight when their workers died)", l, total, parts, inflight))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return []Violation{{Kind: KindLedger, Detail: fmt.Sprintf("%s; ledgers: %d lost of %d at risk in %d reports, %d gone unreported", strings.Join(bad, "; "), led.UpdatesLost, led.UpdatesLostBound, led.Reports, led.Unreported)}}
}
