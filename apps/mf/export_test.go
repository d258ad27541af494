package mf

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadModelCorrupt: a model directory whose files were cut short or
// mixed is refused with the file and line, not read as a smaller model
// (a truncated items.tsv predicted the mean for every item after the cut,
// and its last item without its factors).
func TestLoadModelCorrupt(t *testing.T) {
	const users = "1\t0.5\t0.1\t0.2\n2\t-0.5\t0.3\t0.4\n"
	const items = "7\t0.25\t1\t2\n8\t0.75\t3\t4\n"
	for _, tc := range []struct {
		name, users, items string
		line               string // where the error points; "" for none
	}{
		{"whole", users, items, ""},
		{"cut in a line", users, items[:len(items)-4], "items.tsv:2"},
		{"cut before the last newline", users, items[:len(items)-1], "items.tsv:2"},
		{"short row", users, "7\t0.25\t1\t2\n8\t0.75\t3\n", "items.tsv:2"},
		{"items of another width", users, "7\t0.25\t1\n", "items.tsv:1"},
		{"empty", users, "", "items.tsv"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range map[string]string{"global.tsv": "mean\t3.5\n", "users.tsv": tc.users, "items.tsv": tc.items} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			m, err := LoadModel(dir)
			if tc.line == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := m.Predict(1, 7); got != 3.5+0.5+0.25+0.1*1+0.2*2 {
					t.Errorf("Predict(1, 7) = %v", got)
				}
				return
			}
			want := filepath.Join(dir, tc.line)
			if !errors.Is(err, ErrModel) || !strings.Contains(err.Error(), want) {
				t.Fatalf("LoadModel: %v; want %v naming %s", err, ErrModel, want)
			}
		})
	}
}
