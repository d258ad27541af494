package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/terrace-ml/terrace/internal/harness/realreplay"
)

// priceCSV writes 30 days of prices every 10 minutes for two zones of
// c3.xlarge and one of r3.large (whose on-demand price the file leaves
// out when noOD).
func priceCSV(t *testing.T, noOD bool) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("timestamp,region,availability_zone,instance_type,product_description,spot_price_usd,ondemand_price_usd\n")
	t0 := time.Date(2015, 3, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 30*24*6; i++ {
		at := t0.Add(time.Duration(i) * 10 * time.Minute).Format("2006-01-02 15:04:05+00:00")
		fmt.Fprintf(&b, "%s,us-east-1,us-east-1a,c3.xlarge,Linux,%.4f,0.21\n", at, 0.03+0.002*float64(i%7))
		fmt.Fprintf(&b, "%s,us-east-1,us-east-1b,c3.xlarge,Linux,%.4f,0.21\n", at, 0.031+0.003*float64(i%5))
		od := "0.175"
		if noOD {
			od = ""
		}
		fmt.Fprintf(&b, "%s,us-east-1,us-east-1a,r3.large,Linux,%.4f,%s\n", at, 0.02+0.001*float64(i%3), od)
	}
	path := filepath.Join(t.TempDir(), "prices.csv")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func runReplayArgs(args ...string) (string, error) {
	cmd := replayCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func TestReplayBadInput(t *testing.T) {
	prices := priceCSV(t, false)
	report := filepath.Join(t.TempDir(), "r.json")
	empty := filepath.Join(t.TempDir(), "empty.csv")
	os.WriteFile(empty, nil, 0o644)
	badJSON := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(badJSON, []byte("{"), 0o644)
	base := []string{"--prices", prices, "--policy", "all", "--simulate", "--report", report}
	cases := []struct {
		name  string
		args  []string
		wants string
	}{
		{"no prices", []string{"--policy", "all", "--report", report}, "--prices"},
		{"no report", []string{"--prices", prices, "--policy", "all"}, "--report"},
		{"bid below zero", append(base, "--bid", "-0.1"), "--bid"},
		{"from before the trace", append(base, "--from", "2014-01-01"), "--from"},
		{"from after the trace", append(base, "--from", "2016-01-01"), "--from"},
		{"segment past the trace", append(base, "--from", "2015-03-20", "--for", "30d"), "--for"},
		{"unknown policy", []string{"--prices", prices, "--policy", "greedy", "--simulate", "--report", report}, "--policy"},
		{"unknown market", append(base, "--market", "auction"), "--market"},
		{"persecond without preemptions", append(base, "--market", "persecond"), "--preemptions"},
		{"malformed on-demand list", append(base, "--ondemand-prices", "c3.xlarge"), "--ondemand-prices"},
		{"empty trace", []string{"--prices", empty, "--policy", "all", "--simulate", "--report", report}, empty},
		{"no on-demand price", []string{"--prices", priceCSV(t, true), "--policy", "all", "--simulate", "--report", report}, "r3.large"},
		{"no such app", append(base, "--app", "bert"), "--app"},
		{"preemptions in the bid market", append(base, "--preemptions", "/nonexistent"), "--preemptions is for --market persecond"},
		{"stray comma in prices", []string{"--prices", prices + ",", "--policy", "all", "--simulate", "--report", report}, `--prices "` + prices + `,": an empty file name`},
		{"stray comma in preemptions", append(base, "--market", "persecond", "--preemptions", ",x.json"), `--preemptions ",x.json": an empty file name`},
		{"no such preemption trace", append(base, "--market", "persecond", "--preemptions", "/nonexistent.json"), "--preemptions: open /nonexistent.json"},
		// Every file is checked before any is read (twentieth session):
		// each was found missing only after the traces before it were
		// read, and here after the empty trace was refused.
		{"a missing trace after another", []string{"--prices", empty + ",/nonexistent.csv", "--policy", "all", "--simulate", "--report", report}, "--prices: open /nonexistent.csv"},
		{"a missing calibration", []string{"--prices", empty, "--calibration", "/nonexistent.json", "--policy", "all", "--simulate", "--report", report}, "--calibration: open /nonexistent.json"},
		{"a missing preemption trace", []string{"--prices", empty, "--market", "persecond", "--preemptions", "/nonexistent.json", "--policy", "all", "--simulate", "--report", report}, "--preemptions: open /nonexistent.json"},
		// The flags' forms, the calibration and its app before the trace
		// too: here the empty trace was refused first.
		{"a span not a duration, before the trace", []string{"--prices", empty, "--for", "-1h", "--policy", "all", "--simulate", "--report", report}, `--for "-1h": want a positive duration`},
		{"a start not a time, before the trace", []string{"--prices", empty, "--from", "yesterday", "--policy", "all", "--simulate", "--report", report}, `--from "yesterday": want a time`},
		{"a malformed calibration, before the trace", []string{"--prices", empty, "--calibration", badJSON, "--policy", "all", "--simulate", "--report", report}, "calibration " + badJSON},
		{"an app the calibration lacks, before the trace", []string{"--prices", empty, "--app", "bert", "--policy", "all", "--simulate", "--report", report}, `--app "bert"`},
		{"a directory for a trace", []string{"--prices", filepath.Dir(empty), "--policy", "all", "--simulate", "--report", report}, "a directory, not a file"},
		{"on-demand price of no market", append(base, "--ondemand-prices", "c3.xlarge=0.21,c3.xlage=0.2"), "c3.xlage"},
		{"from not a time", append(base, "--from", "yesterday"), `--from "yesterday": want a time`},
		{"plot neither svg nor png", append(base, "--plot", "cost.pdf"), "--plot cost.pdf: want a .svg or .png file"},
		{"unknown design", append(base, "--design", "flat"), `--design "flat": want auto, tiers, elastic`},
		{"starts closer than a minute", append(base, "--starts", "1000000000"), "--starts 1000000000: over the segment's"},
		// Taken before (seventeenth session's walkthrough): the replay ran
		// on a bid of NaN or +Inf, and on a provider of no cloud.
		{"bid not a number", append(base, "--bid", "NaN"), "--bid NaN"},
		{"bid infinite", append(base, "--bid", "+Inf"), "--bid +Inf"},
		{"unknown provider", append(base, "--provider", "azure"), `--provider "azure": want aws or gcp`},
		{"infinite speedup", append(base, "--speedup", "+Inf"), "--speedup +Inf"},
		{"infinite passes", append(base, "--passes", "+Inf"), "--passes +Inf"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := runReplayArgs(c.args...)
			if err == nil || !strings.Contains(err.Error(), c.wants) {
				t.Fatalf("got %v, want an error naming %s", err, c.wants)
			}
		})
	}
	real := []string{"--prices", prices, "--report", report}
	short := filepath.Join(t.TempDir(), "short.json")
	os.WriteFile(short, []byte(`{"metadata":{"gap_seconds":3600},"data":[1,1,1,1]}`), 0o644)
	tiers := []string{"--policy", "tiers", "--calibration", repoFile("internal/harness/realreplay/testdata/local-lr-a9a.json")}
	for _, c := range []struct {
		name  string
		args  []string
		wants string
	}{
		{"real: all, default calibration", append(real, "--policy", "all", "--for", "1h"), "machines 32 and reliable_machines"},
		{"real: bidbrain, default calibration", append(real, "--policy", "bidbrain", "--for", "1h"), "max_machines 128"},
		{"real: bidbrain, tiers' calibration", append(real, "--policy", "bidbrain", "--for", "1h", "--calibration", repoFile("internal/harness/realreplay/testdata/local-lr-a9a.json")), "max_machines 4"},
		{"real: no segment", append(real, "--policy", "ondemand"), "--for"},
		{"real: segment too long", append(real, "--policy", "ondemand", "--for", "30d", "--speedup", "3600"), "--max-wall"},
		{"real: several starts", append(real, "--policy", "tiers", "--for", "1h", "--starts", "2"), "--starts"},
		{"real: part of a pass", append(real, "--policy", "tiers", "--for", "1h", "--passes", "1.5"), "--passes"},
		{"real: plot", append(real, "--policy", "tiers", "--for", "1h", "--plot", "cost.svg"), "--plot cost.svg without --simulate"},
		{"real: bidbrain elastic, default calibration", append(real, "--policy", "bidbrain", "--for", "1h", "--design", "elastic"), "twice max_machines 128, no reliable machine"},
		// 2 h of the 4 h trace are the past: a 3 h segment outlasts it.
		{"real: segment past the preemption trace", append(append(real, tiers...), "--market", "persecond", "--preemptions", short, "--for", "3h"), "--for 3h: the segment ends at 2015-03-15T03:00:00Z, after the preemption trace " + short},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := runReplayArgs(c.args...)
			if err == nil || !strings.Contains(err.Error(), c.wants) {
				t.Fatalf("got %v, want an error naming %s", err, c.wants)
			}
			if strings.Contains(c.name, "calibration") && !errors.Is(err, realreplay.ErrTooMany) {
				t.Errorf("%v: want realreplay.ErrTooMany", err)
			}
		})
	}
}

// TestReplaySimulate runs the whole command on a small synthetic trace and
// reads back its report and plot.
func TestReplaySimulate(t *testing.T) {
	dir := t.TempDir()
	report, plot := filepath.Join(dir, "r.json"), filepath.Join(dir, "p.svg")
	out, err := runReplayArgs("--prices", priceCSV(t, false), "--policy", "all", "--simulate", "--epochs", "2",
		"--from", "2015-03-15", "--for", "5d", "--starts", "3", "--plot", plot, "--report", report)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	raw, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Policies map[string]struct {
			Dollars       *float64 `json:"dollars"`
			Hours         *float64 `json:"hours"`
			Evictions     *int     `json:"evictions"`
			StageSwitches *int     `json:"stage_switches"`
			UpdatesLost   *float64 `json:"updates_lost"`
		} `json:"policies"`
		Runs                      []json.RawMessage `json:"runs"`
		BidBrainVsOnDemand        *float64          `json:"bidbrain_vs_ondemand"`
		BidBrainVsCheckpoint      *float64          `json:"bidbrain_vs_checkpoint"`
		BidBrainVsOnDemandMedian  *float64          `json:"bidbrain_vs_ondemand_median"`
		BidBrainVsCheckpointWorst *float64          `json:"bidbrain_vs_checkpoint_worst"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ondemand", "checkpoint", "tiers", "bidbrain"} {
		p := rep.Policies[name]
		if p.Dollars == nil || p.Hours == nil || p.Evictions == nil || p.StageSwitches == nil || p.UpdatesLost == nil {
			t.Errorf("policies.%s incomplete: %s", name, raw)
		}
	}
	if len(rep.Runs) != 3 || rep.BidBrainVsOnDemand == nil || rep.BidBrainVsCheckpoint == nil || rep.BidBrainVsOnDemandMedian == nil || rep.BidBrainVsCheckpointWorst == nil {
		t.Errorf("report lacks runs or ratios: %s", raw)
	}
	if !strings.Contains(out, "bidbrain/ondemand dollars: median") {
		t.Errorf("summary:\n%s", out)
	}
	if svg, err := os.ReadFile(plot); err != nil || !bytes.Contains(svg, []byte("<svg")) {
		t.Errorf("plot: %v", err)
	}
}

// TestReplayPages: a week of prices in two pages of AWS's answer, given
// as one --prices list, replays from the default start, half the trace
// in (its last price is 6 d 23 h 50 min in; the start was 14 days in,
// outside the trace, and the error named --from, which was not given);
// the first page alone, which has a NextToken, is replayed with a word
// that it is one page of more; a second preemption trace for its one
// market is named as not used.
func TestReplayPages(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2023, 8, 1, 0, 0, 0, 0, time.UTC)
	var pages [2]strings.Builder
	for i := 7*24*6 - 1; i >= 0; i-- { // newest first, as AWS lists
		b := &pages[0]
		if i < 3*24*6 {
			b = &pages[1]
		}
		if b.Len() > 0 {
			b.WriteString(",\n")
		}
		at := t0.Add(time.Duration(i) * 10 * time.Minute).Format("2006-01-02T15:04:05+00:00")
		fmt.Fprintf(b, `{"AvailabilityZone": "us-west-2a", "InstanceType": "c3.xlarge", "ProductDescription": "Linux/UNIX", "SpotPrice": "%.4f", "Timestamp": "%s"}`, 0.03+0.002*float64(i%7), at)
	}
	var paths []string
	for i, token := range []string{"eyJ2IjoyfQ==", ""} {
		paths = append(paths, filepath.Join(dir, fmt.Sprintf("page%d.json", i+1)))
		body := `{"SpotPriceHistory": [` + "\n" + pages[i].String() + "\n" + `], "NextToken": "` + token + `"}`
		if err := os.WriteFile(paths[i], []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	report := filepath.Join(dir, "r.json")
	args := []string{"--ondemand-prices", "c3.xlarge=0.21", "--policy", "ondemand", "--simulate", "--epochs", "1", "--report", report}
	out, err := runReplayArgs(append(args, "--prices", strings.Join(paths, ","))...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.Contains(out, "NextToken") || !strings.Contains(out, "2023-08-04T11:55:00Z") {
		t.Errorf("two pages from half the week: want no word of a NextToken, a start at 2023-08-04T11:55:00Z:\n%s", out)
	}
	out, err = runReplayArgs(append(args, "--prices", paths[0])...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, paths[0]+" has a NextToken") {
		t.Errorf("one page: no word of its NextToken:\n%s", out)
	}
	// Two preemption traces for the trace's one market: the second is
	// not used, and the run says so.
	var sky []string
	for i := range 2 {
		sky = append(sky, filepath.Join(dir, fmt.Sprintf("sky%d.json", i)))
		if err := os.WriteFile(sky[i], []byte(`{"metadata":{"gap_seconds":600},"data":[`+strings.Repeat("1,", 2000)+`1]}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err = runReplayArgs(append(args, "--prices", strings.Join(paths, ","), "--market", "persecond", "--preemptions", strings.Join(sky, ","))...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "2 preemption traces for 1 markets (assigned in turn): "+sky[1]+" not used") {
		t.Errorf("no word of the unused trace:\n%s", out)
	}
	var rep struct {
		Market, Provider, Prices, Preemptions string
		PreemptionsAt                         []struct {
			Trace   string
			AtHours float64 `json:"at_hours"`
		} `json:"preemptions_at"`
	}
	if b, err := os.ReadFile(report); err != nil || json.Unmarshal(b, &rep) != nil {
		t.Fatalf("report: %v", err)
	}
	if rep.Market != "persecond" || rep.Provider != "aws" || rep.Prices != strings.Join(paths, ",") || rep.Preemptions != strings.Join(sky, ",") {
		t.Errorf("the report does not say which traces it replayed: %+v", rep)
	}
	// One start sits half the 333 h trace in, as before starts were
	// spread over the preemption traces, and says so.
	if len(rep.PreemptionsAt) != 1 || rep.PreemptionsAt[0].Trace != sky[0] || math.Abs(rep.PreemptionsAt[0].AtHours-2001*600/3600.0/2) > 1e-9 {
		t.Errorf("the one start sat at %+v, want half of %s", rep.PreemptionsAt, sky[0])
	}
	if !strings.Contains(out, "sits in the preemption traces at 166.8 h of sky0.json's 333.5") {
		t.Errorf("no word of where the start sat in the trace:\n%s", out)
	}
}

// twoTypeHistory writes to dir 20 days from t0 of an AWS JSON price
// history of two markets, type a in us-east-1a and type b in us-east-1b,
// every 10 minutes, their prices a little above pa and pb; it returns the
// file.
func twoTypeHistory(t *testing.T, dir string, t0 time.Time, a string, pa float64, b string, pb float64) string {
	t.Helper()
	var w strings.Builder
	w.WriteString(`{"SpotPriceHistory": [`)
	for i := 0; i < 20*24*6; i++ {
		at := t0.Add(time.Duration(i) * 10 * time.Minute).Format("2006-01-02T15:04:05.000Z")
		if i > 0 {
			w.WriteString(",")
		}
		fmt.Fprintf(&w, `{"AvailabilityZone": "us-east-1a", "InstanceType": "%s", "ProductDescription": "Linux/UNIX", "SpotPrice": "%.4f", "Timestamp": "%s"},`, a, pa+0.001*float64(i%5), at)
		fmt.Fprintf(&w, `{"AvailabilityZone": "us-east-1b", "InstanceType": "%s", "ProductDescription": "Linux/UNIX", "SpotPrice": "%.4f", "Timestamp": "%s"}`, b, pb+0.004*float64(i%7), at)
	}
	w.WriteString("]}")
	path := filepath.Join(dir, "history.json")
	if err := os.WriteFile(path, []byte(w.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReplayOtherTypes: a price history in AWS's JSON of types other than
// the default job's (c3.xlarge) replays without a calibration file: the
// job runs on the trace's type nearest in work rate, as many machines as
// do the same work, and says so. With a calibration file the type stays
// the file's, and its absence is an error naming the file.
func TestReplayOtherTypes(t *testing.T) {
	dir := t.TempDir()
	prices := twoTypeHistory(t, dir, time.Date(2016, 3, 1, 0, 0, 0, 0, time.UTC), "m4.large", 0.02, "c4.2xlarge", 0.08)
	args := []string{"--prices", prices, "--ondemand-prices", "m4.large=0.12,c4.2xlarge=0.419", "--policy", "all", "--simulate",
		"--epochs", "2", "--from", "2016-03-08", "--for", "3d", "--starts", "2", "--report", filepath.Join(dir, "r.json")}
	out, err := runReplayArgs(args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// By ratio m4.large's 6.5 ECU (14/6.5 = 2.15) is nearer c3.xlarge's 14
	// than c4.2xlarge's 31 (2.21): 32 x 14 / 6.5 = 69 machines.
	if !strings.Contains(out, "runs on m4.large instead, the reference 69 of them for 32 c3.xlarge") {
		t.Errorf("no word on the job's type, or another:\n%s", out)
	}
	if !strings.Contains(out, "bidbrain/ondemand dollars: median") {
		t.Errorf("summary:\n%s", out)
	}
	cal := filepath.Join(dir, "cal.json")
	if err := os.WriteFile(cal, []byte(`{"note": "a file of one's own"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runReplayArgs(append(args, "--calibration", cal)...); err == nil || !strings.Contains(err.Error(), "no market of the job's instance type c3.xlarge") {
		t.Errorf("a calibration file whose type the trace lacks: %v\n%s", err, out)
	}
}

// TestReplayNewerTypes: a trace of types AWS published no ECU for (the
// fifth generation on) runs without a calibration file, their rates
// estimated from their sizes and said to be; it was refused.
func TestReplayNewerTypes(t *testing.T) {
	dir := t.TempDir()
	prices := twoTypeHistory(t, dir, time.Date(2023, 3, 1, 0, 0, 0, 0, time.UTC), "m5.large", 0.035, "c5.xlarge", 0.06)
	out, err := runReplayArgs("--prices", prices, "--ondemand-prices", "m5.large=0.096,c5.xlarge=0.17", "--policy", "all", "--simulate",
		"--epochs", "2", "--starts", "2", "--report", filepath.Join(dir, "r.json"))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// c5.xlarge, 4 vCPUs at 3.5 ECU, is c3.xlarge's 14 ECU: the same 32.
	for _, want := range []string{"no published work rate for m5.large, c5.xlarge: estimated", "runs on c5.xlarge instead, the reference 32 of them", "bidbrain/ondemand dollars: median"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
