package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// TestEarlyErrors: each silent case of issue 13 now fails before anything
// starts, naming the flag (and file).
func TestEarlyErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.svm")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	train, test := repoFile(defaultTrain), repoFile(defaultTest)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--train", empty, "--test", test}, []string{"--train", "empty.svm", "empty"}},
		{[]string{"--train", train, "--test", empty}, []string{"--test", "empty.svm", "empty"}},
		{[]string{"--train", filepath.Join(dir, "nope"), "--test", test}, []string{"--train", "nope", "no such file"}},
		{[]string{"--train", train, "--test", test, "--servers", "2", "--replication", "3"}, []string{"--replication 3", "--servers 2"}},
		{[]string{"--train", train, "--test", test, "--replication", "0"}, []string{"--replication 0"}},
		{[]string{"--train", train, "--test", test, "--epochs", "-1"}, []string{"--passes -1"}},
		{[]string{"--train", train, "--test", test, "--app", "svm"}, []string{"--app", "svm"}},
		{[]string{"--train", train, "--test", test, "--lr", "-1"}, []string{"--lr -1", ">= 0"}},
		{[]string{"--train", train, "--test", test, "--l2", "NaN"}, []string{"--l2 NaN"}},
		{[]string{"--train", train, "--test", test, "--significance", "-0.5"}, []string{"--significance -0.5"}},
	} {
		cmd := trainCmd()
		cmd.SetArgs(c.args)
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		err := cmd.ExecuteContext(context.Background())
		if err == nil {
			t.Errorf("train %v: no error", c.args)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("train %v: error %q does not say %q", c.args, err, w)
			}
		}
	}
}

// TestWorkerRefusesConflictingJob: a worker's flags that say otherwise
// than the cluster's job are refused by name; flags not given take the
// job's values.
func TestWorkerRefusesConflictingJob(t *testing.T) {
	parse := func(args ...string) *appFlags {
		var a appFlags
		fs := pflag.NewFlagSet("w", pflag.ContinueOnError)
		a.register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return &a
	}
	train, test := repoFile(defaultTrain), repoFile(defaultTest)
	a := parse("--train", train, "--test", test, "--epochs", "5")
	cluster, err := a.toJob()
	if err != nil {
		t.Fatal(err)
	}
	b := parse("--train", train, "--test", test, "--epochs", "10")
	own, err := b.toJob()
	if err != nil {
		t.Fatal(err)
	}
	err = b.useJob(own, cluster)
	if !errors.Is(err, api.ErrJobConflict) || !strings.Contains(err.Error(), "--passes 10") {
		t.Fatalf("--epochs 10 against a 5-pass job: %v", err)
	}
	c := parse("--app", "lda", "--train", repoFile(defaultLDATrain))
	if own, err = c.toJob(); err != nil {
		t.Fatal(err)
	}
	if err := c.useJob(own, cluster); !errors.Is(err, api.ErrJobConflict) || !strings.Contains(err.Error(), "--app lda") {
		t.Fatalf("--app lda against an lr job: %v", err)
	}
	d := parse()
	own, _ = d.toJob()
	if err := d.useJob(own, cluster); err != nil {
		t.Fatalf("a flagless worker: %v", err)
	}
	if d.passes != 5 || d.train != train {
		t.Fatalf("a flagless worker trains %d passes on %s, want the job's 5 on %s", d.passes, d.train, train)
	}
}

// TestJobFile reads a job definition and refuses unknown settings.
func TestJobFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "job.yaml")
	os.WriteFile(good, []byte("app: lr\ntrain: "+repoFile(defaultTrain)+"\ntest: "+repoFile(defaultTest)+"\nepochs: 3\nconsistency: bsp\n"), 0o644)
	j, err := readJobFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if j.Passes != 3 || j.Consistency != "bsp" || j.Batch != 0 || j.Scale != "max" || j.LR != 1 {
		t.Fatalf("job %+v: want 3 passes, bsp, defaults filled in", j)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("app: lr\nservers: 3\n"), 0o644)
	if _, err := readJobFile(bad); err == nil || !strings.Contains(err.Error(), `"servers"`) {
		t.Fatalf("a job file with a cluster setting: %v", err)
	}
}

// TestDrillWorkersCarryAJob: train --processes with no app flag at all
// hands its workers a job (--app), since a worker given none waits for
// the cluster's instead of submitting its defaults; the drill's workers
// then waited out their join timeout and none trained.
func TestDrillWorkersCarryAJob(t *testing.T) {
	for _, given := range [][]string{nil, {"--epochs", "3"}, {"--app", "lda"}} {
		cmd := trainCmd()
		if err := cmd.Flags().Parse(given); err != nil {
			t.Fatal(err)
		}
		args := appArgs(cmd.Flags())
		var w appFlags
		fs := pflag.NewFlagSet("worker", pflag.ContinueOnError)
		w.register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatalf("%v: the workers' %v: %v", given, args, err)
		}
		if !w.jobGiven() {
			t.Errorf("train %v: the drill's workers get %v, no job", given, args)
		}
		if want := cmd.Flags().Lookup("app").Value.String(); w.app != want {
			t.Errorf("train %v: the workers' app %q, want %q", given, w.app, want)
		}
	}
}

// TestFlagFileEmptyValue: a key with no value in a job file or a --config
// file ("test:") is an empty value, not "<nil>" ("--test <nil>: stat
// <nil>"), and a file that is not a map says what it should be.
func TestFlagFileEmptyValue(t *testing.T) {
	dir := t.TempDir()
	job := filepath.Join(dir, "job.yaml")
	os.WriteFile(job, []byte("app: lr\ntrain: "+repoFile("datasets/a9a/a9a.gz")+"\ntest:\n"), 0o600)
	if j, err := readJobFile(job); err != nil && strings.Contains(err.Error(), "<nil>") || j.Test == "<nil>" {
		t.Errorf("job file with \"test:\": test %q, %v", j.Test, err)
	}
	cfg := filepath.Join(dir, "config.yaml")
	os.WriteFile(cfg, []byte("name:\n"), 0o600)
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	name := fs.String("name", "default", "")
	fs.String("config", cfg, "")
	if err := applyConfig(fs); err != nil || *name != "" {
		t.Errorf("--config with \"name:\": %q, %v; want \"\"", *name, err)
	}
	os.WriteFile(cfg, []byte("passes 2\n"), 0o600)
	if err := applyConfig(fs); err == nil || !strings.Contains(err.Error(), "want a YAML map of flag names to values") {
		t.Errorf("--config of a line that is no map: %v", err)
	}
}
