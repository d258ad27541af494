package coord

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/storage/checkpoint"
)

// Cluster checkpoints are taken at epoch boundaries: when every partition
// of an epoch is complete, every push of it is acknowledged, and holding
// the next epoch's work until the servers have written leaves them
// quiescent, so the checkpoint is one consistent model. The coordinator
// asks through the layout, collects the servers' reports, and writes the
// commit record last (checkpoint.CommitCluster).

// commitMeta is the commit record: what a resume needs besides the servers'
// data.
type commitMeta struct {
	Seq        uint64          `json:"seq"`
	Epoch      int             `json:"epoch"` // the last epoch completed
	Servers    []string        `json:"servers"`
	Tables     []layout.Table  `json:"tables"`
	Partitions int             `json:"partitions"`
	MaxClock   int64           `json:"max_clock"`
	Time       time.Time       `json:"time"`
	Extra      json.RawMessage `json:"extra,omitempty"`
	// States names the partition-state file, if any partition has state.
	States *checkpoint.StateFile `json:"partition_states,omitempty"`
}

// writeStatesLocked writes every partition's current state into the
// checkpoint (nothing if none has state). It runs at an epoch boundary,
// while no worker reports progress.
func (c *Coordinator) writeStatesLocked(dir string, seq uint64) (*checkpoint.StateFile, error) {
	if len(c.stateVer) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	blobs := make(map[int][]byte, len(c.stateVer))
	for p, ver := range c.stateVer {
		b, err := c.states.GetState(ctx, p, ver)
		if err != nil {
			return nil, fmt.Errorf("coord: checkpoint %d: partition %d state: %w", seq, p, err)
		}
		blobs[p] = b
	}
	sf, err := checkpoint.WritePartStates(dir, seq, blobs)
	return &sf, err
}

// startCheckpointLocked asks for a checkpoint after epoch e; c.mu is held.
func (c *Coordinator) startCheckpointLocked(e int) {
	due := c.ckptRequested || c.opts.CheckpointEvery > 0 && (e+1)%c.opts.CheckpointEvery == 0
	if c.opts.CheckpointDir == "" || !due || c.lay.Checkpoint != nil {
		return
	}
	c.ckptRequested = false
	c.ckptSeq++
	var ids []string
	for _, s := range c.lay.Servers {
		ids = append(ids, s.ID)
	}
	c.lay.Checkpoint = &layout.Checkpoint{Dir: c.opts.CheckpointDir, Seq: c.ckptSeq, Epoch: e, Servers: ids}
	c.ckptReported = map[string]bool{}
	c.ckptStart = time.Now()
}

// RequestCheckpoint asks for a checkpoint at the next epoch boundary.
func (c *Coordinator) RequestCheckpoint() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opts.CheckpointDir == "" {
		return fmt.Errorf("%w: the coordinator has no checkpoint directory", errBadRequest)
	}
	c.ckptRequested = true
	return nil
}

// Checkpointed records that server from wrote its part of checkpoint seq,
// or failed to (err); the checkpoint is committed once every ring server
// has written, and abandoned on the first failure.
func (c *Coordinator) Checkpointed(from string, seq uint64, errMsg string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ck := c.lay.Checkpoint
	if ck == nil || ck.Seq != seq {
		return nil
	}
	if errMsg != "" {
		c.log.Warn("checkpoint abandoned", "seq", seq, "server", from, "err", errMsg)
		c.lay.Checkpoint = nil
		c.publish()
		return nil
	}
	c.ckptReported[from] = true
	for _, id := range ck.Servers {
		if !c.ckptReported[id] {
			return nil
		}
	}
	m := commitMeta{Seq: seq, Epoch: ck.Epoch, Servers: ck.Servers, Tables: c.lay.Tables,
		Partitions: c.lay.Partitions, MaxClock: c.maxClock, Time: time.Now().UTC()}
	var meta []byte
	sf, err := c.writeStatesLocked(ck.Dir, seq)
	if err == nil {
		m.States = sf
		meta, err = json.Marshal(m)
	}
	if err == nil {
		err = checkpoint.CommitCluster(ck.Dir, seq, meta)
	}
	if err != nil {
		c.log.Warn("checkpoint not committed", "seq", seq, "err", err)
	} else {
		c.ckptDone = append(c.ckptDone, CheckpointStat{Seq: seq, Epoch: ck.Epoch, Seconds: time.Since(c.ckptStart).Seconds()})
	}
	c.lay.Checkpoint = nil
	c.publish()
	return nil
}

// CheckpointStat describes a committed checkpoint.
type CheckpointStat struct {
	Seq     uint64  `json:"seq"`
	Epoch   int     `json:"epoch"`
	Seconds float64 `json:"seconds"`
}

// Checkpoints lists the checkpoints this coordinator committed.
func (c *Coordinator) Checkpoints() []CheckpointStat {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]CheckpointStat(nil), c.ckptDone...)
}

// resumeLocked loads the newest committed checkpoint under dir: tables,
// completed epochs and the servers that wrote it; the layout is then not
// Ready until every server has loaded its slots (Restored).
func (c *Coordinator) resumeLocked(dir string) error {
	var states map[int][]byte
	seq, raw, skipped, err := checkpoint.LatestCommit(dir, func(seq uint64, raw []byte) error {
		var m commitMeta
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("commit record %d: %w", seq, err)
		}
		states = nil
		if m.States == nil {
			return nil
		}
		var err error
		states, err = checkpoint.ReadPartStates(dir, *m.States)
		return err
	})
	for _, s := range skipped {
		c.log.Warn("passing over a damaged checkpoint commit", "err", s)
	}
	if err != nil {
		return fmt.Errorf("coord: resume: %w", err)
	}
	var m commitMeta
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("coord: resume: commit record %d: %w", seq, err)
	}
	c.lay.Tables = m.Tables
	if m.Partitions > 0 {
		c.lay.Partitions = m.Partitions
	}
	c.work = map[int]*epochWork{}
	c.doneBefore = m.Epoch + 1
	c.maxClock = m.MaxClock
	for p, blob := range states {
		c.nextStateVer++
		c.stateVer[p] = c.nextStateVer
		if err := c.states.PutState(context.Background(), p, c.nextStateVer, blob); err != nil {
			return fmt.Errorf("coord: resume: partition %d state: %w", p, err)
		}
	}
	c.ckptSeq = seq
	c.lay.Resume = &layout.Checkpoint{Dir: dir, Seq: seq, Epoch: m.Epoch, Servers: m.Servers}
	c.restored = map[string]bool{}
	return nil
}

// Restored records that server from has loaded its slots of the resumed
// checkpoint; once every ring server has, the layout may become Ready.
func (c *Coordinator) Restored(from string, seq uint64, errMsg string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.lay.Resume
	if r == nil || r.Seq != seq {
		return nil
	}
	if errMsg != "" {
		return fmt.Errorf("coord: server %s could not restore checkpoint %d: %s", from, seq, errMsg)
	}
	c.restored[from] = true
	if len(c.lay.Servers)+c.removed < c.opts.Servers {
		return nil
	}
	for _, s := range c.lay.Servers {
		if !c.restored[s.ID] {
			return nil
		}
	}
	c.lay.Resume = nil
	c.publish()
	return nil
}
