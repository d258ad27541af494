package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runPlanCmd runs `terrace plan` in process with args.
func runPlanCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := planCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestPlanReport(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plan.json")
	out, err := runPlanCmd(t, "--reliable", "2", "--transient", "6", "--link-mbps", "reliable=50,transient=1000", "--report", path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "stage 2 (the most updates per dollar)") {
		t.Errorf("summary:\n%s", out)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Stage      int      `json:"stage"`
		Bottleneck []string `json:"bottleneck"`
		Candidates []struct {
			Stage            int     `json:"stage"`
			UpdatesPerSecond float64 `json:"updates_per_second"`
			DollarsPerHour   float64 `json:"dollars_per_hour"`
			UpdatesPerDollar float64 `json:"updates_per_dollar"`
		} `json:"candidates"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Stage != 2 || len(rep.Bottleneck) == 0 || len(rep.Candidates) != 3 {
		t.Fatalf("report %s", b)
	}
	for _, c := range rep.Candidates {
		if c.UpdatesPerSecond <= 0 || c.DollarsPerHour <= 0 || c.UpdatesPerDollar <= 0 {
			t.Errorf("candidate %+v", c)
		}
	}
	if s1, best := rep.Candidates[0], rep.Candidates[1]; best.UpdatesPerSecond < 1.5*s1.UpdatesPerSecond {
		t.Errorf("slow reliable links: stage 2 %.0f updates/s against stage 1 %.0f", best.UpdatesPerSecond, s1.UpdatesPerSecond)
	}
}

// TestPlanBadInput: each mistake fails at once, naming its flag.
func TestPlanBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--stage", "3", "--reliable", "2", "--transient", "0"}, "--stage 3"},
		{[]string{"--stage", "4"}, "--stage \"4\""},
		{[]string{"--reliable", "0"}, "--reliable 0"},
		{[]string{"--transient", "-1"}, "--transient -1"},
		{[]string{"--link-mbps", "spot=100"}, "--link-mbps item 1: \"spot\": unknown class"},
		{[]string{"--link-mbps", "reliable:100"}, "--link-mbps item 1 \"reliable:100\": want CLASS=VALUE"},
		{[]string{"--price", "reliable=-2"}, "--price item 1"},
		{[]string{"--price", "transient=0", "--transient", "2"}, "--price transient=0"},
		{[]string{"--consistency", "eventual"}, "--consistency"},
		{[]string{"--sync-interval", "0s"}, "--sync-interval"},
		{[]string{"--workers-per-machine", "0"}, "--workers-per-machine 0: must be at least 1"},
		{[]string{"--measure-window", "5s"}, "--measure-window needs --measure"},
		{[]string{"--app", "mf"}, "--app needs --measure"},
		{[]string{"--measure", "--measure-window", "0s"}, "--measure-window 0s"},
		{[]string{"--measure", "--measure-warmup", "-1s"}, "--measure-warmup -1s"},
		{[]string{"--measure", "--link-mbps", "reliable=slow"}, "--link-mbps item 1"},
		{[]string{"--measure", "--stage", "3", "--transient", "0"}, "--stage 3"},
		{[]string{"--measure", "--app", "svm"}, "unknown --app \"svm\""},
		{[]string{"--measure", "--app", "mf"}, "--app mf needs --train and --test"},
	} {
		if _, err := runPlanCmd(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %q", tc.args, err, tc.want)
		}
	}
}
