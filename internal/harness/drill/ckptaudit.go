package drill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/control/coord"
	"github.com/terrace-ml/terrace/internal/server"
	"github.com/terrace-ml/terrace/internal/storage/checkpoint"
	"github.com/terrace-ml/terrace/ps"
)

// ErrNoAuditTable: a checkpoint of a job that ran no audit.
var ErrNoAuditTable = errors.New("drill: the job ran no audit")

// Saved is what the audit table held in a committed cluster checkpoint:
// the acknowledged audit increments of each worker rank up to the pass
// the checkpoint was taken after. A job resumed from the checkpoint
// starts with these counts on its servers; work acknowledged after them
// is rolled back.
type Saved struct {
	Seq  uint64
	Pass int // the last pass completed, from 0 (-1: none, or no checkpoint: Seq 0)
	// Inside: the checkpoint was taken inside pass Pass+1 (the last
	// server's notice, or one asked for now), not at its boundary.
	Inside bool
	ByRank map[int]int64
}

// Total is the increments saved, every rank's.
func (s Saved) Total() int64 {
	var n int64
	for _, v := range s.ByRank {
		n += v
	}
	return n
}

// CheckpointAudit reads the audit table of the newest committed
// checkpoint under dir that is intact (the one a coordinator --resume
// loads). A directory with no committed checkpoint saved nothing: it
// returns Seq 0, Pass -1 and no error. A checkpoint without the audit table (a
// job that ran no audit) is an error.
func CheckpointAudit(ctx context.Context, dir string) (Saved, error) {
	s := Saved{Pass: -1, ByRank: map[int]int64{}}
	ck, err := coord.LatestCommitted(ctx, dir)
	if errors.Is(err, checkpoint.ErrNoCheckpoint) && len(ck.Skipped) == 0 {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("drill: audit of checkpoint under %s: %w", dir, err)
	}
	s.Seq, s.Pass, s.Inside = ck.Seq, ck.Pass, ck.InPass != nil
	for _, t := range ck.Tables {
		if t.Spec.Name != AuditTable {
			continue
		}
		err := server.ReadCheckpoint(ctx, dir, ck.Seq, ck.Servers, t.ID, func(key uint64, val []float32) error {
			if len(val) > 0 {
				s.ByRank[auditRank(key)] += int64(val[0])
			}
			return nil
		})
		if err != nil {
			return s, fmt.Errorf("drill: audit of checkpoint %d under %s: %w", ck.Seq, dir, err)
		}
		return s, nil
	}
	return s, fmt.Errorf("%w: checkpoint %d under %s holds no %s table", ErrNoAuditTable, ck.Seq, dir, AuditTable)
}

// UpdatesLost counts the acknowledged audit increments a cluster's
// servers do not hold: by rank, what the workers' audit logs say was
// acknowledged (every log of the rank, for a rank given to a second
// worker) plus base (what a resumed job's servers started with,
// CheckpointAudit), less the audit table's count. Call it once the job is
// done and before Close, while the servers still run; it needs
// ClusterConfig.Audit.
func (c *Cluster) UpdatesLost(ctx context.Context, base map[int]int64) (int64, error) {
	if c.d.cfg.Audit == nil {
		return 0, fmt.Errorf("%w: the cluster runs no audit", ErrBadConfig)
	}
	acked := map[int]int64{}
	ranks := 0
	for r, v := range base {
		acked[r] += v
		ranks = max(ranks, r+1)
	}
	for _, l := range c.AuditLogs() {
		acked[l.Rank] += l.Acked
		ranks = max(ranks, l.Rank+1)
	}
	if ranks == 0 {
		return 0, nil // nothing acknowledged: nothing to lose
	}
	c.mu.Lock()
	addr := c.d.coord
	c.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	obs, err := ps.Dial(cctx, addr, ps.Options{Rank: -1, NodeID: "cluster-observer", Logger: c.d.log})
	if err != nil {
		return 0, fmt.Errorf("drill: audit observer: %w", err)
	}
	defer obs.Close()
	perWorker, _, err := ReadAudit(cctx, obs, ranks, 0)
	if err != nil {
		return 0, err
	}
	var lost int64
	for r, n := range acked {
		lost += max(0, n-int64(perWorker[r]))
	}
	return lost, nil
}

// RolledBack is the acknowledged work a restart from saved loses: the
// increments acknowledged by a stopped job's workers (acked, from their
// audit logs, plus base, what the job had resumed with) beyond those the
// checkpoint holds.
func RolledBack(base, acked map[int]int64, saved Saved) int64 {
	var n int64
	for _, v := range base {
		n += v
	}
	for _, v := range acked {
		n += v
	}
	return max(0, n-saved.Total())
}

// RequestCheckpoint asks the coordinator for a cluster checkpoint at the
// next pass boundary, or with now inside the pass (POST /v1/checkpoint;
// the coordinator needs --checkpoint-dir, ClusterConfig.CoordArgs) and
// returns the sequence number of the checkpoint that will serve it.
func (c *Cluster) RequestCheckpoint(ctx context.Context, now bool) (uint64, error) {
	c.mu.Lock()
	addr := c.d.coord
	c.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	seq, err := api.NewClient(addr, nil).RequestCheckpoint(cctx, now)
	if err != nil {
		return 0, fmt.Errorf("drill: checkpoint request: %w", err)
	}
	return seq, nil
}

// addBase counts a resumed job's checkpointed increments as acknowledged
// by the first worker of each rank (a rank no worker of this run held is
// added as a worker that did not finish: it lost nothing if the servers
// restored its count).
func addBase(audits []WorkerAudit, base map[int]int64) []WorkerAudit {
	for r, n := range base {
		i := slices.IndexFunc(audits, func(w WorkerAudit) bool { return w.Rank == r })
		if i < 0 {
			audits = append(audits, WorkerAudit{Rank: r, AckedLogged: n})
			continue
		}
		audits[i].AckedLogged += n
	}
	return audits
}
