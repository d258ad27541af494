package main

import (
	"bytes"
	"os/exec"
	"testing"
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
		{[]string{"server", "--class", "cheap"}, `--class: "cheap": unknown class`},
		{[]string{"worker", "--class", "cheap"}, `--class: "cheap": unknown class`},
	} {
		out, err := exec.Command(terrace(t), tc.args...).CombinedOutput()
		if err == nil || !bytes.Contains(out, []byte(tc.want)) {
			t.Errorf("%q: %v, want an error containing %q:\n%s", tc.args, err, tc.want, out)
		}
	}
}
