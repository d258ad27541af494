package checkpoint

import (
	"fmt"
	"github.com/terrace-ml/terrace/internal/crc32c"
	"strings"
	"testing"
)

// TestReadsVersion1Manifest: a version 1 MANIFEST wrote the training pass
// as meta.epoch and a partition's passes as its epoch; it is read as such,
// into Pass and Passes, with no layout epoch.
func TestReadsVersion1Manifest(t *testing.T) {
	body := `{
    "version": 1,
    "seq": 4,
    "created": "2026-11-21T17:49:27.267Z",
    "meta": {
      "epoch": 3,
      "partitions": { "0": { "epoch": 2, "offset": 7 } }
    },
    "files": []
  }`
	file := fmt.Sprintf("{\n  \"crc32c\": %d,\n  \"manifest\": %s\n}\n", crc32c.Checksum([]byte(body)), body)
	c, err := decodeManifest([]byte(file), "ckpt-0000000004", 4)
	if err != nil {
		t.Fatal(err)
	}
	if c.Meta.Pass != 3 || c.Meta.Epoch != 0 {
		t.Errorf("version 1 meta read as pass %d, epoch %d; want pass 3, no epoch", c.Meta.Pass, c.Meta.Epoch)
	}
	if p := c.Meta.Partitions[0]; p.Passes != 2 || p.Offset != 7 {
		t.Errorf("version 1 partition read as %+v, want 2 passes at offset 7", p)
	}
	future := strings.Replace(body, `"version": 1`, `"version": 3`, 1)
	file = fmt.Sprintf("{\n  \"crc32c\": %d,\n  \"manifest\": %s\n}\n", crc32c.Checksum([]byte(future)), future)
	if _, err := decodeManifest([]byte(file), "ckpt-0000000004", 4); err == nil || !strings.Contains(err.Error(), "manifest version 3") {
		t.Errorf("a version 3 manifest: %v, want a refusal naming its version", err)
	}
}
