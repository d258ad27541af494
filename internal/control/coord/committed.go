package coord

import (
	"context"
	"fmt"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/internal/storage/checkpoint"
)

// Committed is a committed cluster checkpoint, as a reader outside the
// cluster sees it (terrace export): which servers wrote it, the tables
// it holds and the job it trained.
type Committed struct {
	Dir     string
	Seq     uint64
	Pass    int // the last pass completed, from 0
	Servers []string
	Tables  []layout.Table
	// Job is nil in checkpoints written before commit records named it.
	Job *api.Job
	// InPass is the pass in progress, if it was taken inside one.
	InPass *InPass
	// Skipped says why each newer checkpoint was passed over.
	Skipped []error
}

// LatestCommitted reads the newest committed checkpoint under dir whose
// record and every server's part are intact, reading every byte of the
// parts (checkpoint.CheckServers).
func LatestCommitted(ctx context.Context, dir string) (Committed, error) {
	var m commitMeta
	seq, _, skipped, err := checkpoint.LatestCommit(dir, func(seq uint64, raw []byte) error {
		m = commitMeta{}
		if err := decodeCommit(raw, &m); err != nil {
			return fmt.Errorf("coord: commit record %d under %s: %w", seq, dir, err)
		}
		return checkpoint.CheckServers(ctx, dir, seq, m.Servers)
	})
	if err != nil {
		return Committed{Skipped: skipped}, err
	}
	return Committed{Dir: dir, Seq: seq, Pass: m.Pass, Servers: m.Servers, Tables: m.Tables, Job: m.Job, InPass: m.InPass, Skipped: skipped}, nil
}
