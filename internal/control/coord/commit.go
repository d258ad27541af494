package coord

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/storage/checkpoint"
)

// commitMeta is a cluster checkpoint's commit record: what a resume needs
// besides the servers' data (docs/format/checkpoint.md).
type commitMeta struct {
	Seq        uint64         `json:"seq"`
	Pass       int            `json:"pass"` // the last pass completed
	Servers    []string       `json:"servers"`
	Tables     []layout.Table `json:"tables"`
	Partitions int            `json:"partitions"`
	MaxClock   int64          `json:"max_clock"`
	Time       time.Time      `json:"time"`
	// States names the partition-state file, if any partition has state.
	States *checkpoint.StateFile `json:"partition_states,omitempty"`
	// StatePieces gives, for a partition whose state is in several pieces
	// (a split left it so), the byte length of each: its blob in the
	// state file is their concatenation, in row order.
	StatePieces map[int][]int `json:"state_pieces,omitempty"`
	Job         *api.Job      `json:"job,omitempty"`
	// JobNumber numbers the job among the cluster's, from 1 (0 in a
	// record written before it was kept: the cluster's first).
	JobNumber uint64 `json:"job_number,omitempty"`
	// InPass, in a checkpoint taken inside a pass, is the pass in
	// progress and its pieces (absent at a pass boundary, and in records
	// written before the seventeenth session).
	InPass *InPass `json:"in_pass,omitempty"`
}

// commit writes checkpoint ck's partition states and then its commit
// record, which makes the checkpoint count. The versions it reads stay
// named until Committed: at a pass boundary no worker reports progress,
// and inside a pass the checkpoint in progress names them (referenced).
func (c *Coordinator) commit(ctx context.Context, ck *Commit) error {
	m := commitMeta{Seq: ck.Seq, Pass: ck.Pass, Servers: ck.Servers, Tables: ck.Tables,
		Partitions: ck.Partitions, MaxClock: ck.MaxClock, Time: time.Now().UTC(), Job: ck.Job, JobNumber: ck.JobNumber,
		InPass: ck.InPass}
	if len(ck.States) > 0 {
		blobs, pieces, err := c.readStates(ctx, ck.States)
		if err != nil {
			return fmt.Errorf("coord: checkpoint %d: %w", ck.Seq, err)
		}
		sf, err := checkpoint.WritePartStates(ck.Dir, ck.Seq, blobs)
		if err != nil {
			return err
		}
		m.States, m.StatePieces = &sf, pieces
	}
	meta, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return checkpoint.CommitCluster(ck.Dir, ck.Seq, meta)
}

// prune removes the checkpoints under dir older than the newest
// CheckpointKeep, after a commit: a job that checkpoints every pass would
// otherwise fill its disk. What it could not remove is logged, and tried
// again after the next commit.
func (c *Coordinator) prune(dir string) {
	removed, err := checkpoint.PruneCluster(dir, c.opts.CheckpointKeep)
	if len(removed) > 0 {
		c.log.Info("removed old checkpoints", "dir", dir, "seqs", removed, "keep", c.opts.CheckpointKeep)
	}
	if err != nil {
		c.log.Warn("could not remove old checkpoints", "dir", dir, "err", err)
	}
}

// readStates fetches the blobs of states, concatenating the pieces of a
// partition whose state is in several.
func (c *Coordinator) readStates(ctx context.Context, states map[int][]uint64) (map[int][]byte, map[int][]int, error) {
	c.mu.Lock()
	st := c.states
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	blobs, pieces := map[int][]byte{}, map[int][]int{}
	for p, vers := range states {
		var all []byte
		for _, v := range vers {
			b, err := st.GetState(ctx, p, v)
			if err != nil {
				return nil, nil, fmt.Errorf("partition %d state: %w", p, err)
			}
			all = append(all, b...)
			if len(vers) > 1 {
				pieces[p] = append(pieces[p], len(b))
			}
		}
		blobs[p] = all
	}
	if len(pieces) == 0 {
		pieces = nil
	}
	return blobs, pieces, nil
}

// resume loads the newest committed checkpoint under dir, passing over
// damaged ones (a damaged record, server part or partition state), into the machine, and its partition states into the
// store.
func (c *Coordinator) resume(dir string) error {
	r, states, pieces, err := c.latestCommit(dir)
	if err != nil {
		return fmt.Errorf("coord: resume: %w", err)
	}
	vers := c.m.Resume(r)
	for p, blob := range states {
		for i, v := range vers[p] {
			piece := blob
			if n := pieces[p]; len(n) > 0 {
				off := sum(n[:i])
				piece = blob[off : off+n[i]]
			}
			c.states.(*memStates).put(p, v, piece) // Open's store, until SetStateStore
		}
	}
	return nil
}

// rewindTo reads the newest intact checkpoint under dir for the machine
// to go back to (Machine.Rewound).
func (c *Coordinator) rewindTo(dir string) {
	r, _, _, err := c.latestCommit(dir)
	c.event(func(m *Machine) { m.Rewound(r, err) })
}

// latestCommit reads the newest committed checkpoint under dir, passing
// over damaged ones (a damaged record, server part or partition state):
// what the machine resumes from, and its partitions' states with the
// byte lengths of their pieces (commitMeta.StatePieces).
func (c *Coordinator) latestCommit(dir string) (Resumed, map[int][]byte, map[int][]int, error) {
	var m commitMeta
	var states map[int][]byte
	_, _, skipped, err := checkpoint.LatestCommit(dir, func(seq uint64, raw []byte) error {
		m, states = commitMeta{}, nil
		if err := decodeCommit(raw, &m); err != nil {
			return fmt.Errorf("commit record %d: %w", seq, err)
		}
		// Every server reads every part at its restore: one it cannot
		// load would leave the layout unready for good, so a damaged part
		// passes over the whole checkpoint, as a damaged record does.
		if err := checkpoint.CheckServers(context.Background(), dir, seq, m.Servers); err != nil {
			return err
		}
		if m.States == nil {
			return nil
		}
		var err error
		if states, err = checkpoint.ReadPartStates(dir, *m.States); err == nil {
			err = checkPieces(m.StatePieces, states)
		}
		return err
	})
	for _, s := range skipped {
		c.log.Warn("passing over a damaged checkpoint commit", "err", s)
	}
	if err != nil {
		return Resumed{}, nil, nil, err
	}
	next, err := checkpoint.NextClusterSeq(dir)
	if err != nil {
		return Resumed{}, nil, nil, err
	}
	counts := map[int]int{}
	for p := range states {
		counts[p] = max(1, len(m.StatePieces[p]))
	}
	r := Resumed{Dir: dir, Seq: m.Seq, Pass: m.Pass, Servers: m.Servers, Tables: m.Tables,
		Partitions: m.Partitions, MaxClock: m.MaxClock, States: counts, Job: m.Job, JobNumber: m.JobNumber, Next: next,
		InPass: m.InPass}
	return r, states, m.StatePieces, nil
}

// decodeCommit reads a commit record; one written before the training
// pass was named "pass" calls it "epoch". A record whose pieces of the
// pass in progress do not tile its partitions is refused (ErrBadPieces),
// as a damaged one is.
func decodeCommit(raw []byte, m *commitMeta) error {
	var old struct {
		Pass  *int `json:"pass"`
		Epoch *int `json:"epoch"`
	}
	if err := json.Unmarshal(raw, m); err != nil {
		return err
	}
	if err := json.Unmarshal(raw, &old); err == nil && old.Pass == nil && old.Epoch != nil {
		m.Pass = *old.Epoch
	}
	if m.InPass != nil {
		return m.InPass.check(m.Pass, m.Partitions)
	}
	return nil
}

// checkPieces checks that the piece lengths of each partition add up to
// its blob.
func checkPieces(pieces map[int][]int, states map[int][]byte) error {
	for p, n := range pieces {
		if slices.ContainsFunc(n, func(x int) bool { return x < 0 }) || sum(n) != len(states[p]) {
			return fmt.Errorf("partition %d: state pieces of %v bytes in a blob of %d", p, n, len(states[p]))
		}
	}
	return nil
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}
