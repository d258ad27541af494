package coord

import (
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
}

// LatestCommitted reads the newest intact commit record under dir.
func LatestCommitted(dir string) (Committed, error) {
	seq, raw, _, err := checkpoint.LatestCommit(dir, nil)
	if err != nil {
		return Committed{}, err
	}
	var m commitMeta
	if err := decodeCommit(raw, &m); err != nil {
		return Committed{}, fmt.Errorf("coord: commit record %d under %s: %w", seq, dir, err)
	}
	return Committed{Dir: dir, Seq: seq, Pass: m.Pass, Servers: m.Servers, Tables: m.Tables, Job: m.Job}, nil
}
