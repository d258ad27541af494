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
				// Summed in float32, as the job's evaluation sums.
				want := float32(3.5) + float32(0.5) + float32(0.25) + (float32(0.1)*1 + float32(0.2)*2)
				if got := m.Predict(1, 7); got != float64(want) {
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

// TestLoadModelVersions: a version 1 model directory (global.tsv of the
// mean, min and max, written before the version line) reads as numbers;
// one of version 2 with string ids numbers them in its rows' order; a
// version this build does not know, or a string id twice, is refused.
func TestLoadModelVersions(t *testing.T) {
	m, err := LoadModel("testdata/model-v1")
	if err != nil {
		t.Fatal(err)
	}
	if m.UserIDs != nil || m.ItemIDs != nil || m.Mean != 3.5 || m.Min != 1 || m.Max != 5 || len(m.Users[2]) != 3 {
		t.Fatalf("version 1: %+v", m)
	}
	want := float32(3.5) + float32(-0.5) + float32(0.25) + (float32(0.3)*1 + float32(0.4)*2)
	if got := m.Predict(2, 7); got != float64(want) {
		t.Errorf("version 1: Predict(2, 7) = %v, want %v", got, want)
	}

	global := "version\t2\nmean\t3\nmin\t1\nmax\t5\nusers\tstrings\nitems\tnumbers\n"
	for _, tc := range []struct {
		name, global, users string
		err                 error
	}{
		{"strings", global, "AKM1MP6P0OYPR\t0.5\t1\nA2CX7LUOHB2NDG\t-0.5\t0.5\n", nil},
		{"a string id twice", global, "AKM1MP6P0OYPR\t0.5\t1\nAKM1MP6P0OYPR\t-0.5\t2\n", ErrModel},
		{"a newer version", strings.Replace(global, "version\t2", "version\t3", 1), "1\t0\t0\n", ErrVersion},
		{"ids of no kind", strings.Replace(global, "items\tnumbers", "items\twords", 1), "1\t0\t0\n", ErrModel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range map[string]string{"global.tsv": tc.global, "users.tsv": tc.users, "items.tsv": "7\t0.25\t2\n"} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			m, err := LoadModel(dir)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("LoadModel: %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			u, ok := m.UserIDs.Lookup([]byte("A2CX7LUOHB2NDG"))
			if !ok || u != 1 || m.ItemIDs != nil {
				t.Fatalf("user A2CX7LUOHB2NDG is %d, %v (item ids %v); want 1", u, ok, m.ItemIDs)
			}
			if got, want := m.Predict(u, 7), float32(3)+float32(-0.5)+float32(0.25)+float32(0.5)*2; got != float64(want) {
				t.Errorf("Predict = %v, want %v", got, want)
			}
		})
	}
}

// TestLoadModelRefused: a model directory no export writes is refused,
// naming the file: a file cut short at a line's end (global.tsv counts
// each file's rows), a numeric id twice, a value not finite. A cut at a
// line's end read as a smaller model, the second row of an id replaced
// the first, and a NaN scored as an RMSE of NaN.
func TestLoadModelRefused(t *testing.T) {
	const global = "version\t2\nmean\t3.5\nmin\t1\nmax\t5\nusers\tnumbers\nitems\tnumbers\nuser_rows\t2\nitem_rows\t2\n"
	const users = "1\t0.5\t0.1\t0.2\n2\t-0.5\t0.3\t0.4\n"
	const items = "7\t0.25\t1\t2\n8\t0.75\t3\t4\n"
	for _, tc := range []struct {
		name, global, users, items string
		file                       string // named by the error; "" for none
	}{
		{"whole", global, users, items, ""},
		{"whole, CRLF", strings.ReplaceAll(global, "\n", "\r\n"), strings.ReplaceAll(users, "\n", "\r\n"), items, ""},
		{"cut at a line's end", global, users, "7\t0.25\t1\t2\n", "items.tsv"},
		{"a row more", global, users + "3\t0\t0\t0\n", items, "users.tsv"},
		{"an id twice", global, "1\t0.5\t0.1\t0.2\n1\t-0.5\t0.3\t0.4\n", items, "users.tsv:2"},
		{"NaN", global, users, "7\t0.25\tNaN\t2\n8\t0.75\t3\t4\n", "items.tsv:1"},
		{"infinite", global, users, "7\t0.25\t1\t2\n8\t+Inf\t3\t4\n", "items.tsv:2"},
		{"rows not a count", strings.Replace(global, "item_rows\t2", "item_rows\t-2", 1), users, items, "global.tsv:8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range map[string]string{"global.tsv": tc.global, "users.tsv": tc.users, "items.tsv": tc.items} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			m, err := LoadModel(dir)
			if tc.file == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(m.Users) != 2 || len(m.Items) != 2 {
					t.Fatalf("%d users, %d items; want 2 and 2", len(m.Users), len(m.Items))
				}
				return
			}
			if want := filepath.Join(dir, tc.file); !errors.Is(err, ErrModel) || !strings.Contains(err.Error(), want) {
				t.Fatalf("LoadModel: %v; want %v naming %s", err, ErrModel, want)
			}
		})
	}
}
