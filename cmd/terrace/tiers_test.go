package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/terrace-ml/terrace/internal/harness/drill"
)

// TestTierFlags: bad tier input fails at once with a message naming the
// flag (issue 11), without starting a cluster.
func TestTierFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "--reliable", "1", "--transient", "1"}, "--reliable and --transient need --processes"},
		{[]string{"train", "--processes", "--reliable", "1", "--transient", "0", "--stage", "3"}, "--stage 3 with --reliable 1 --transient 0: stage 3 needs at least one transient machine"},
		{[]string{"train", "--processes", "--reliable", "0", "--transient", "2"}, "--reliable 0: need at least one reliable machine"},
		{[]string{"train", "--processes", "--reliable", "1", "--transient", "1", "--stage", "4"}, `--stage: "4": unknown stage`},
		{[]string{"train", "--processes", "--reliable", "1", "--transient", "1", "--servers", "2"}, "--servers and --workers cannot be given with --reliable/--transient"},
		{[]string{"train", "--processes", "--reliable", "1", "--transient", "1", "--kill", "spot@all@3s"}, `unknown class "spot"`},
		{[]string{"train", "--processes", "--reliable", "1", "--transient", "1", "--add", "transient@all@3s"}, `machine count "all"`},
		{[]string{"train", "--stage", "2"}, "--stage needs --reliable and --transient"},
		{[]string{"train", "--processes", "--reliable", "1", "--transient", "1", "--link-mbps", "reliable=fast"}, `--link-mbps item 1 "reliable=fast": want a finite number >= 0`},
		{[]string{"train", "--processes", "--reliable", "1", "--transient", "1", "--link-mbps", "spot=10"}, `--link-mbps item 1: "spot": unknown class`},
		{[]string{"server", "--link-mbps", "10"}, "--link-mbps needs --bind-ip"},
		{[]string{"server", "--bind-ip", "10.1.2.3"}, `--bind-ip: link: "10.1.2.3" is not a loopback address`},
		{[]string{"coordinator", "--class", "transient"}, "--class transient: the coordinator runs only on reliable machines"},
		{[]string{"coordinator", "--class", "spot"}, `--class: "spot": unknown class`},
		{[]string{"coordinator", "--stage", "0"}, `--stage: "0": unknown stage`},
		{[]string{"coordinator", "--resume", "ck"}, `the coordinator's --resume takes no directory, it resumes from --checkpoint-dir (--checkpoint-dir ck --resume)`},
		{[]string{"coordinator", "extra"}, `unexpected argument "extra"`},
		{[]string{"server", "--class", "cheap"}, `--class: "cheap": unknown class`},
		{[]string{"worker", "--class", "cheap"}, `--class: "cheap": unknown class`},
		// Refused before the worker waits for a coordinator (none listens here).
		{[]string{"worker", "--coordinator", "127.0.0.1:1", "--lr", "-0.1"}, "--lr -0.1: want a finite number >= 0"},
	} {
		out, err := exec.Command(terrace(t), tc.args...).CombinedOutput()
		if err == nil || !bytes.Contains(out, []byte(tc.want)) {
			t.Errorf("%q: %v, want an error containing %q:\n%s", tc.args, err, tc.want, out)
		}
	}
}

// TestBackupLossDrill kills one of two reliable machines in stage 2: a
// BackupPS and its workers. The ActivePS acknowledge no push until a
// BackupPS's ledger has it, so the job stalled for good while the dead
// BackupPS stayed in the layout; now it is found and taken out, and the
// job trains to its end in stage 2 without losing an acknowledged push.
func TestBackupLossDrill(t *testing.T) {
	if os.Getenv("TERRACE_TIERS_DRILL") == "" {
		t.Skip("set TERRACE_TIERS_DRILL=1")
	}
	backupLossDrill(t, "2", 3)
}

// backupLossDrill kills one of reliable machines 3 s into a stage-2 job of
// 60 passes with two transient machines, and checks that the job outlived
// the fault, lost and doubled no acknowledged push, and that left workers
// finished. 60 passes: on a quiet host 20 ended before the fault (0.12 s a
// pass: nothing was killed).
func backupLossDrill(t *testing.T, reliable string, left int) *drillReport {
	t.Helper()
	rep := runDrill(t, "--reliable", reliable, "--transient", "2", "--stage", "2", "--audit-every", "1",
		"--failure-timeout", "2s", "--passes", "60", "--kill", "reliable@1@3s")
	if len(rep.Faults) == 0 {
		t.Fatal("the job ended before its fault: nothing was killed")
	}
	if rep.AckedUpdatesLost == nil || *rep.AckedUpdatesLost != 0 {
		t.Errorf("acked_updates_lost %v, want 0", ptr(rep.AckedUpdatesLost))
	}
	if rep.AckedUpdatesDuplicated == nil || *rep.AckedUpdatesDuplicated != 0 {
		t.Errorf("applied twice %v, want 0", ptr(rep.AckedUpdatesDuplicated))
	}
	if n := finishedWorkers(rep); n != left {
		t.Errorf("%d workers finished, want the %d not killed", n, left)
	}
	return rep
}

// TestLastBackupLossDrill kills the only reliable machine in stage 2: the
// last BackupPS and its worker. Kept in the layout, the dead BackupPS
// stood the job still for good (the ActivePS held their acknowledgements
// for its ledger; the drill timed out); now the cluster leaves the tiers
// for stage 1 on the ActivePS ring, and the job trains to its end
// without losing an acknowledged push.
func TestLastBackupLossDrill(t *testing.T) {
	if os.Getenv("TERRACE_TIERS_DRILL") == "" {
		t.Skip("set TERRACE_TIERS_DRILL=1")
	}
	if rep := backupLossDrill(t, "1", 2); rep.Stage != 1 {
		t.Errorf("stage %d at the end, want 1 (out of the tiers)", rep.Stage)
	}
}

// TestTierRevocationDrill revokes every transient machine of a stage-2
// cluster at once, without notice and then with notice: training goes on
// from the BackupPS; without notice the loss is at most one sync
// interval's worth and nothing is lost beyond it, with notice nothing at
// all (TERRACE_TIERS_DRILL=1; two runs of about 20 s).
func TestTierRevocationDrill(t *testing.T) {
	if os.Getenv("TERRACE_TIERS_DRILL") == "" {
		t.Skip("set TERRACE_TIERS_DRILL=1")
	}
	for _, action := range []string{"kill", "evict"} {
		// 60 passes, as in TestBackupLossDrill: the job must outlast the
		// fault however fast the host trains.
		rep := runDrill(t, "--reliable", "2", "--transient", "2", "--stage", "2", "--sync-interval", "1s", "--audit-every", "1",
			"--failure-timeout", "2s", "--passes", "60", "--"+action, "transient@all@3s")
		if len(rep.Faults) == 0 {
			t.Fatalf("%s: the job ended before its fault: nothing was revoked", action)
		}
		if rep.TierReport == nil || rep.UpdatesLost == nil || rep.UpdatesLostBound == nil {
			t.Fatalf("%s: no tier figures in the report", action)
		}
		if rep.AckedUpdatesLost == nil || *rep.AckedUpdatesLost != 0 {
			t.Errorf("%s: acked_updates_lost %v, want 0", action, ptr(rep.AckedUpdatesLost))
		}
		if rep.AckedUpdatesDuplicated == nil || *rep.AckedUpdatesDuplicated != 0 {
			t.Errorf("%s: applied twice %v, want 0", action, ptr(rep.AckedUpdatesDuplicated))
		}
		if action == "kill" {
			// The design's relation, in sum over workers: the ledgers
			// count every audit push the audit finds lost, and more only
			// by the pushes in flight when their workers died.
			if rep.UpdatesLostAudit == nil || rep.UpdatesLostLedgerAudit == nil {
				t.Errorf("kill: no audit or ledger count of audit pushes lost")
			} else if a, l := *rep.UpdatesLostAudit, *rep.UpdatesLostLedgerAudit; a > l {
				t.Errorf("kill: the audit finds %d audit pushes lost, the ledgers count only %d", a, l)
			}
		}
		if action == "evict" && *rep.UpdatesLost != 0 {
			t.Errorf("evict: updates_lost %d with notice, want 0", *rep.UpdatesLost)
		}
		if *rep.UpdatesLost > *rep.UpdatesLostBound {
			t.Errorf("%s: updates_lost %d above one sync interval's worth (%d)", action, *rep.UpdatesLost, *rep.UpdatesLostBound)
		}
		if rep.Stage != 1 || len(rep.StageHistory) == 0 {
			t.Errorf("%s: stage %d, history %+v: want a fallback or switch to stage 1", action, rep.Stage, rep.StageHistory)
		}
		if n := finishedWorkers(rep); n != 2 {
			t.Errorf("%s: %d workers finished, want the 2 on reliable machines", action, n)
		}
	}
}

// TestSummaryKilledWorkersExamples: a drill's summary says that its count
// of examples leaves out killed workers' (107700 of 181500 audited read as
// the whole job's).
func TestSummaryKilledWorkersExamples(t *testing.T) {
	var b bytes.Buffer
	audited := int64(181500)
	printSummary(&b, &trainReport{App: "nn", Examples: 107700, Report: &drill.Report{RunDir: "run", ExamplesAudited: &audited}})
	if want := "the audit counts 181500 example trainings in all"; !strings.Contains(b.String(), want) {
		t.Fatalf("summary:\n%s\nwant %q", b.String(), want)
	}
}

// TestSummaryFaultsNotInjected: a planned fault the drill did not inject
// (README's --add transient@2@6s when training ends at 5 s) is said on the
// terminal, not only in the report's faults_not_injected.
func TestSummaryFaultsNotInjected(t *testing.T) {
	var b bytes.Buffer
	printSummary(&b, &trainReport{App: "lr", Report: &drill.Report{RunDir: "run",
		FaultsNotInjected: []drill.Skipped{{PlannedS: 6, Action: drill.Add, Role: drill.Transient, Reason: "training had finished"}}}})
	if want := "terrace: drill: add transient planned at 6s not injected: training had finished\n"; !strings.Contains(b.String(), want) {
		t.Fatalf("summary:\n%s\nwant the line %q", b.String(), want)
	}
}

// TestSummaryReassignments: train's summary says what rapid
// reassignment did; a run with --reassign said nothing of it on the
// terminal.
func TestSummaryReassignments(t *testing.T) {
	var b bytes.Buffer
	printSummary(&b, &trainReport{App: "lr", straggleReport: &straggleReport{Straggle: "one:4x", Reassignments: 3, ExamplesReassigned: 3982}})
	if want := "terrace: stragglers one:4x: 3 reassignments, 3982 examples reassigned, 0 splits refused\n"; !strings.Contains(b.String(), want) {
		t.Fatalf("summary:\n%s\nwant the line %q", b.String(), want)
	}
}

// TestTierReplicationCapped: the default k on tiers of one machine is 1,
// as a cluster of one server caps it; passed on as 2, the coordinator of
// train --processes --reliable 1 --transient 0 --stage 1 (and of plan
// --measure's calibration) exited at start. A k given is checked.
func TestTierReplicationCapped(t *testing.T) {
	if k, err := tierReplication(false, 2, 1, 0); k != 1 || err != nil {
		t.Errorf("the default on one machine: k %d, %v; want 1", k, err)
	}
	if k, err := tierReplication(false, 2, 2, 4); k != 2 || err != nil {
		t.Errorf("the default on six machines: k %d, %v; want 2", k, err)
	}
	if _, err := tierReplication(true, 2, 1, 0); err == nil || !strings.Contains(err.Error(), "--replication 2 with --reliable 1 --transient 0") {
		t.Errorf("--replication 2 given on one machine: %v, want it refused by name", err)
	}
}
