package drill

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseSchedule(t *testing.T) {
	for _, tc := range []struct {
		name, kill, evict, add string
		want                   Schedule
		err                    string // substring of the error; "" for success
	}{
		{name: "empty", want: nil},
		{name: "blank", kill: "  ", evict: "", want: nil},
		{name: "one kill", kill: "server@1s", want: Schedule{{Kill, Server, time.Second, 0}}},
		{name: "ordered by time", kill: "server@2s,worker@4s,coordinator@6s", evict: "worker@3s",
			want: Schedule{{Kill, Server, 2 * time.Second, 0}, {Evict, Worker, 3 * time.Second, 0}, {Kill, Worker, 4 * time.Second, 0}, {Kill, Coordinator, 6 * time.Second, 0}}},
		{name: "kill before evict at the same time", kill: "server@1s", evict: "worker@1s",
			want: Schedule{{Kill, Server, time.Second, 0}, {Evict, Worker, time.Second, 0}}},
		{name: "equal times keep order", kill: "worker@1s,server@1s",
			want: Schedule{{Kill, Worker, time.Second, 0}, {Kill, Server, time.Second, 0}}},
		{name: "spaces and fractions", kill: " server @ 1.5s , worker@0s",
			want: Schedule{{Kill, Worker, 0, 0}, {Kill, Server, 1500 * time.Millisecond, 0}}},
		{name: "milliseconds", evict: "server@750ms", want: Schedule{{Evict, Server, 750 * time.Millisecond, 0}}},
		{name: "unknown role", kill: "server@1s,srv@2s", err: `--kill item 2 "srv@2s": unknown role "srv"`},
		{name: "no at", kill: "server", err: `--kill item 1 "server": want one or two @`},
		{name: "no unit", evict: "worker@3", err: `--evict item 1 "worker@3": time "3" is not a duration`},
		{name: "bad duration", kill: "worker@soon", err: `--kill item 1 "worker@soon": time "soon"`},
		{name: "negative", kill: "worker@-1s", err: `--kill item 1 "worker@-1s": time "-1s" is negative`},
		{name: "empty item", kill: "server@1s,,worker@2s", err: `--kill item 2 "": empty item`},
		{name: "trailing comma", evict: "server@1s,", err: `--evict item 2 "": empty item`},
		{name: "empty role", kill: "@1s", err: `--kill item 1 "@1s": unknown role ""`},
		{name: "empty time", kill: "server@", err: `--kill item 1 "server@": time ""`},
		{name: "two ats on a role", kill: "server@1s@2s", err: `unknown class "server"`},
		{name: "class-wide kill", kill: "transient@all@3s", want: Schedule{{Kill, Transient, 3 * time.Second, AllMachines}}},
		{name: "class without count", evict: "transient@3s", want: Schedule{{Evict, Transient, 3 * time.Second, AllMachines}}},
		{name: "two machines", kill: "transient@2@3s", want: Schedule{{Kill, Transient, 3 * time.Second, 2}}},
		{name: "bad count", kill: "transient@0@3s", err: `machine count "0"`},
		{name: "unknown class", kill: "spot@all@3s", err: `unknown class "spot"`},
		{name: "add", add: "transient@2@5s", want: Schedule{{Add, Transient, 5 * time.Second, 2}}},
		{name: "add all", add: "transient@all@5s", err: `machine count "all"`},
		{name: "add a role", add: "server@5s", err: `--add wants CLASS@N@DURATION`},
		{name: "count not supported", kill: "2*server@1s", err: `unknown role "2*server"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSchedule(tc.kill, tc.evict, tc.add)
			if tc.err != "" {
				if err == nil {
					t.Fatalf("got %v, want an error containing %q", got, tc.err)
				}
				if !errors.Is(err, ErrBadSchedule) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %q: want ErrBadSchedule and %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
