package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/terrace-ml/terrace/internal/crc32c"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

const (
	manifestName = "MANIFEST"
	// manifestVersion 2 names the training pass "pass" and the layout
	// epoch "epoch"; version 1 wrote the pass as "epoch" (and a
	// partition's passes as its "epoch"), and is read as such.
	manifestVersion = 2
)

// manifest is the MANIFEST's body. It sits inside an envelope that adds
// the CRC32C of the body's exact bytes, so that the file stays plain JSON
// and its checksum does not depend on re-encoding it the same way.
type manifest struct {
	Version int        `json:"version"`
	Seq     uint64     `json:"seq"`
	Created time.Time  `json:"created"`
	Meta    Meta       `json:"meta"`
	Files   []FileInfo `json:"files"`
}

type envelope struct {
	CRC      *uint32         `json:"crc32c"`
	Manifest json.RawMessage `json:"manifest"`
}

func encodeManifest(c *Checkpoint) ([]byte, error) {
	m := manifest{Version: manifestVersion, Seq: c.Seq, Created: c.Created, Meta: c.Meta, Files: c.Files}
	if m.Files == nil {
		m.Files = []FileInfo{}
	}
	body, err := json.MarshalIndent(m, "  ", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "{\n  \"crc32c\": %d,\n  \"manifest\": %s\n}\n", crc32c.Checksum(body), body)
	return b.Bytes(), nil
}

func decodeManifest(b []byte, dir string, seq uint64) (*Checkpoint, error) {
	path := filepath.Join(dir, manifestName)
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, path, err)
	}
	if env.CRC == nil || len(env.Manifest) == 0 {
		return nil, fmt.Errorf("%w: %s: no crc32c or manifest field", ErrCorrupt, path)
	}
	if got := crc32c.Checksum(env.Manifest); got != *env.CRC {
		return nil, fmt.Errorf("%w: %s: checksum %d, want %d", ErrCorrupt, path, got, *env.CRC)
	}
	var m manifest
	if err := json.Unmarshal(env.Manifest, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, path, err)
	}
	switch m.Version {
	case manifestVersion:
	case 1:
		if err := m.Meta.fromVersion1(env.Manifest); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, path, err)
		}
	default:
		return nil, fmt.Errorf("checkpoint: %s: manifest version %d, want %d (or 1)", path, m.Version, manifestVersion)
	}
	// A directory copied or renamed under another number is not that
	// checkpoint: its sequence number would order it wrongly.
	if m.Seq != seq {
		return nil, fmt.Errorf("%w: %s: manifest of checkpoint %d", ErrCorrupt, path, m.Seq)
	}
	seen := make(map[string]bool, len(m.Files))
	for _, fi := range m.Files {
		if err := checkName(fi.Name); err != nil || seen[fi.Name] || fi.Table != fi.Spec.Name || fi.Size < 0 || fi.Records < 0 {
			return nil, fmt.Errorf("%w: %s: bad file entry %q", ErrCorrupt, path, fi.Name)
		}
		seen[fi.Name] = true
	}
	return &Checkpoint{Dir: dir, Seq: seq, Created: m.Created, Meta: m.Meta, Files: m.Files}, nil
}

// open returns checkpoint seq of root if it is complete: its MANIFEST is
// whole and every file it lists has the listed size and CRC32C. Checking
// the CRCs reads every data file, which is what lets Latest pass over a
// checkpoint whose data rotted rather than fail halfway through a resume.
func open(ctx context.Context, root string, seq uint64) (*Checkpoint, error) {
	dir := filepath.Join(root, dirName(seq))
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrIncomplete, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	c, err := decodeManifest(b, dir, seq)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 1<<20)
	for _, fi := range c.Files {
		if err := checkFile(ctx, filepath.Join(dir, fi.Name), fi, buf); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// fromVersion1 reads a version 1 manifest's meta, whose "epoch" was the
// training pass (not a layout epoch) and whose partitions counted their
// passes as "epoch".
func (m *Meta) fromVersion1(body json.RawMessage) error {
	var v1 struct {
		Meta struct {
			Epoch      int `json:"epoch"`
			Partitions map[int]struct {
				Epoch int `json:"epoch"`
			} `json:"partitions"`
		} `json:"meta"`
	}
	if err := json.Unmarshal(body, &v1); err != nil {
		return err
	}
	m.Epoch, m.Pass = 0, v1.Meta.Epoch
	for id, p := range v1.Meta.Partitions {
		pp := m.Partitions[id]
		pp.Passes = p.Epoch
		m.Partitions[id] = pp
	}
	return nil
}
