package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestMistakesNameTheFlag tries what a newcomer gets wrong first and
// checks that the command fails at once, naming the flag. Each of these
// was once taken silently (a default instead, or a worker's error deep
// in the run with no flag named).
func TestMistakesNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	job := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(job, []byte("app: lr\nencoding: fp32\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	data := []string{"--train", repoFile("datasets/a9a/a9a.gz"), "--test", repoFile("datasets/a9a/a9a.t.gz")}
	ratings := []string{"--train", filepath.Join(dir, "r.tsv"), "--test", filepath.Join(dir, "r.tsv")}
	factors := filepath.Join(dir, "factors.yaml")
	for name, body := range map[string]string{"r.tsv": "1 2 3\n", "factors.yaml": "app: mf\nfactors: -3\ntrain: " + ratings[1] + "\ntest: " + ratings[1] + "\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "lda"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lda", "topic_word_counts.tsv"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	damaged := filepath.Join(dir, "etcd")
	if err := os.MkdirAll(filepath.Join(damaged, "member", "snap"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(damaged, "member", "snap", "db"), make([]byte, 5000), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "--encoding", "fp32"}, `--encoding "fp32": want raw, sparse, fp16 or int8`},
		{[]string{"train", "--topics", "5"}, "--topics is for --app lda, not lr"},
		{[]string{"train", "--app", "mlr", "--hidden", "5"}, "--hidden is for --app nn, not mlr"},
		{[]string{"train", "--app", "nn", "--hidden", "0"}, "--hidden 0: want one unit or more"},
		{[]string{"train", "--app", "nn", "--hidden", "100000"}, "--hidden 100000: want at most 65536 units"},
		{append([]string{"train", "--app", "mf", "--factors", "0"}, ratings...), "--factors 0: want 1 to 65536"},
		{[]string{"submit", "--coordinator", "127.0.0.1:1", factors}, "--factors -3: want 1 to 65536"},
		{[]string{"worker", "--coordinator", "127.0.0.1:1", "--factors", "8"}, "--factors is for --app mf, not lr"},
		// Flags some apps read and others ignored without a word.
		{[]string{"train", "--app", "nn", "--l1", "0.1"}, "--l1 is for --app lr, lasso, not nn"},
		{[]string{"train", "--app", "lasso", "--lr", "0.1"}, "--lr is for --app lr, mf, mlr, nn, not lasso"},
		{[]string{"train", "--app", "lasso", "--l2", "0.1"}, "--l2 is for --app lr, mf, mlr, nn, not lasso"},
		{[]string{"train", "--app", "mf", "--encoding", "fp16"}, "--encoding is for --app lr, mlr, nn, not mf"},
		{[]string{"train", "--app", "mlr", "--significance", "0.1"}, "--significance is for --app lr, not mlr"},
		// Found only once every pass was trained, the training lost.
		{append([]string{"train", "--app", "lasso", "--model", filepath.Join(dir, "none", "m")}, data...), "--model " + filepath.Join(dir, "none", "m") + ": its directory: "},
		{append([]string{"train", "--model", dir}, data...), "--model " + dir + " is a directory"},
		{[]string{"train", "--consistency", "sspp:2"}, `--consistency "sspp:2"`},
		{[]string{"train", "--partitions", "-1"}, "--partitions -1"},
		// Taken into the layout; every worker then failed to dial it.
		{[]string{"server", "--coordinator", "127.0.0.1:1", "--advertise", "nonsense"}, "--advertise nonsense: want HOST:PORT"},
		{[]string{"server", "--coordinator", "127.0.0.1:1", "--advertise", "h:0"}, "--advertise h:0: want HOST:PORT with a host and a port from 1 to 65535"},
		// A port that is not a number panicked every node and client.
		{[]string{"worker", "--coordinator", "127.0.0.1:127.0.0.1"}, "--coordinator: 127.0.0.1:127.0.0.1: not a coordinator address"},
		{[]string{"events", "--coordinator", "h:1,127.0.0.1:x"}, "--coordinator: 127.0.0.1:x: not a coordinator address"},
		{[]string{"server", "--coordinator", " , "}, "--coordinator: not a coordinator address: none given"},
		{[]string{"predict", "--model", filepath.Join(dir, "lda"), "--data", filepath.Join(dir, "r.tsv")}, "is an lda model: predict scores lr, lasso, mlr, nn and mf models"},
		{[]string{"predict", "--model", filepath.Join(dir, "lda"), "--data", dir}, "--data " + dir + " is a directory: give a data file"},
		// plan took any k and planned as with the machines' count; train
		// named --servers 2, which it refuses beside --reliable.
		{[]string{"plan", "--reliable", "2", "--transient", "2", "--replication", "9"}, "--replication 9 with --reliable 2 --transient 2: each key would need more copies than there are servers (4, one a machine)"},
		{[]string{"train", "--processes", "--reliable", "2", "--transient", "2", "--replication", "9"}, "--replication 9 with --reliable 2 --transient 2: each key would need more copies than there are servers (4, one a machine)"},
		{[]string{"train", "--processes", "--reliable", "1", "--replication", "0"}, "--replication 0: every key needs at least 1 copy"},
		// Found once all the work was done, the report lost with it.
		{[]string{"train", "--report", filepath.Join(dir, "none", "r.json")}, "--report " + filepath.Join(dir, "none", "r.json") + ": its directory: "},
		{[]string{"train", "--report", dir}, "--report " + dir + " is a directory"},
		{[]string{"coordinator", "--listen", "127.0.0.1:0", "--in-memory", "--events", filepath.Join(dir, "none", "e.json")}, "--events " + filepath.Join(dir, "none", "e.json") + ": its directory: "},
		{[]string{"bench", "stragglers", "--plot", filepath.Join(dir, "none", "p.svg")}, "--plot " + filepath.Join(dir, "none", "p.svg") + ": its directory: "},
		// A million in-process servers grew past a gigabyte, and no signal stopped them.
		{[]string{"train", "--servers", "1000000"}, "--servers 1000000: a cluster on this host takes at most 256"},
		{[]string{"train", "--processes", "--workers", "100000"}, "--workers 100000: a cluster on this host takes at most 256"},
		{[]string{"train", "--processes", "--reliable", "1", "--transient", "1000"}, "--reliable 1 --transient 1000 --workers-per-machine 1: a cluster on this host"},
		{[]string{"train", "--coordinators", "3"}, "--coordinators needs --processes"},
		{[]string{"train", "--timeout", "1m"}, "--timeout needs --processes"},
		{[]string{"train", "--audit-every", "4"}, "--audit-every needs --processes"},
		{[]string{"train", "--processes", "--audit-every", "0"}, "--audit-every 0: need at least 1"},
		{[]string{"train", "--failure-timeout", "-1s"}, "--failure-timeout -1s"},
		{[]string{"train", "--log-level", "verbose"}, `"--log-level" flag: want debug, info, warn or error`},
		{append([]string{"train", "--resume", filepath.Join(dir, "none")}, data...), "--resume " + filepath.Join(dir, "none") + ":"},
		{append([]string{"train", "--resume", "a", "--checkpoint-dir", "b"}, data...), "--resume a and --checkpoint-dir b"},
		{[]string{"coordinator", "--listen", "127.0.0.1:0", "--in-memory", "--partitions", "-1"}, "--partitions -1"},
		{[]string{"coordinator", "--listen", "127.0.0.1:0", "--in-memory", "--failure-timeout", "0s"}, "--failure-timeout 0s"},
		{[]string{"coordinator", "--listen", "127.0.0.1:0", "--in-memory", "--log-level", "loud"}, `"--log-level" flag`},
		{[]string{"coordinator", "--listen", "127.0.0.1:0", "--in-memory", "--etcd-dir", filepath.Join(dir, "etcd")}, "--etcd-dir with --in-memory"},
		{[]string{"server", "--coordinator", "127.0.0.1:1", "--log-level", "loud"}, `"--log-level" flag`},
		{[]string{"worker", "--coordinator", "127.0.0.1:1", "--encoding", "fp32"}, `--encoding "fp32"`},
		{[]string{"submit", "--coordinator", "127.0.0.1:1", job}, `--encoding "fp32"`},
		{[]string{"replay", "--prices", "p.csv", "--policy", "all", "--simulate", "--report", "r.json", "--train", "a9a.gz"}, "--train is for a real replay"},
		{[]string{"status", "--coordinator", "127.0.0.1:1", "--watch", "--every", "0s"}, "--every 0s: want a positive interval"},
		{[]string{"bench", "stragglers", "--staleness", "2,-1"}, "--staleness -1: want 0 or more clocks"},
		{[]string{"bench", "stragglers", "--workers", "0"}, "--workers 0: need at least 1"},
		{[]string{"bench", "wire", "--tls", "--sparse-keys", "5"}, "--sparse-keys with --tls: the TLS measurement is dense only"},
		{[]string{"bench", "stragglers", "--servers", "100000"}, "--servers 100000: a cluster on this host takes at most 256"},
		{[]string{"bench", "stragglers", "--repeats", "-1"}, "--repeats -1: need at least 1"},
		// Found once every run was done, the report unwritten; or taken.
		{[]string{"bench", "stragglers", "--plot", filepath.Join(dir, "p.txt")}, "--plot " + filepath.Join(dir, "p.txt") + ": want a .svg or .png file"},
		{[]string{"bench", "stragglers", "--work", "-1ms"}, "--work -1ms: want 0 or more"},
		{[]string{"bench", "stragglers", "--consistency", "bogus"}, "--consistency: the bench runs BSP, and SSP with each --staleness, itself"},
		{[]string{"certs", "list", "--dir", filepath.Join(dir, "none")}, "--dir " + filepath.Join(dir, "none")},
		// etcd panicked in a goroutine of its own: a goroutine dump, exit 2.
		{[]string{"coordinator", "--listen", "127.0.0.1:0", "--etcd-dir", damaged}, "data directory damaged: " + damaged},
		// A mistyped subcommand printed the group's help and exited 0.
		{[]string{"bench", "wrie"}, `unknown command "wrie" for "terrace bench": did you mean "wire"?`},
		{[]string{"certs", "bogus"}, `unknown command "bogus" for "terrace certs"`},
		{[]string{"tokens", "neww"}, `unknown command "neww" for "terrace tokens"`},
		// Not a flag's value, but the same silence: it waited 30 s, saying nothing.
		{[]string{"checkpoint", "--coordinator", "127.0.0.1:1", "--timeout", "1s"}, "terrace: coordinator http://127.0.0.1:1 unreachable (Get "},
		// Asked with, and the coordinator said unreachable; or taken as 0
		// (twentieth session).
		{[]string{"status", "--coordinator", "127.0.0.1:1", "--timeout", "0s"}, "--timeout 0s: want a positive duration"},
		{[]string{"export", "--coordinator", "127.0.0.1:1", "--out", filepath.Join(dir, "m"), "--timeout", "-1s"}, "--timeout -1s: want a positive duration"},
		{[]string{"checkpoint", "--coordinator", "127.0.0.1:1", "--timeout", "-1s"}, "--timeout -1s: want a positive duration, or 0"},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		out, err := exec.CommandContext(ctx, terrace(t), tc.args...).CombinedOutput()
		cancel()
		if err == nil || !bytes.Contains(out, []byte(tc.want)) {
			t.Errorf("terrace %q: %v, want an error containing %q:\n%s", tc.args, err, tc.want, out)
		}
	}
}

// TestExportTimeoutBoundsReach: export's --timeout bounds its wait for an
// unreachable coordinator (--timeout 2s retried for 30 s).
func TestExportTimeoutBoundsReach(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, terrace(t), "export", "--coordinator", "127.0.0.1:1", "--timeout", "2s", "--out", filepath.Join(t.TempDir(), "m")).CombinedOutput()
	if err == nil || !bytes.Contains(out, []byte("coordinator unreachable")) || bytes.Contains(out, []byte("retrying for 30s")) {
		t.Fatalf("export --timeout 2s from no coordinator: %v, want it unreachable within 2s:\n%s", err, out)
	}
}
