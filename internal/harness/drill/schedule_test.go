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
		name, kill, evict string
		want              Schedule
		err               string // substring of the error; "" for success
	}{
		{name: "empty", want: nil},
		{name: "blank", kill: "  ", evict: "", want: nil},
		{name: "one kill", kill: "server@1s", want: Schedule{{Kill, Server, time.Second}}},
		{name: "ordered by time", kill: "server@2s,worker@4s,coordinator@6s", evict: "worker@3s",
			want: Schedule{{Kill, Server, 2 * time.Second}, {Evict, Worker, 3 * time.Second}, {Kill, Worker, 4 * time.Second}, {Kill, Coordinator, 6 * time.Second}}},
		{name: "kill before evict at the same time", kill: "server@1s", evict: "worker@1s",
			want: Schedule{{Kill, Server, time.Second}, {Evict, Worker, time.Second}}},
		{name: "equal times keep order", kill: "worker@1s,server@1s",
			want: Schedule{{Kill, Worker, time.Second}, {Kill, Server, time.Second}}},
		{name: "spaces and fractions", kill: " server @ 1.5s , worker@0s",
			want: Schedule{{Kill, Worker, 0}, {Kill, Server, 1500 * time.Millisecond}}},
		{name: "milliseconds", evict: "server@750ms", want: Schedule{{Evict, Server, 750 * time.Millisecond}}},
		{name: "unknown role", kill: "server@1s,srv@2s", err: `--kill item 2 "srv@2s": unknown role "srv"`},
		{name: "no at", kill: "server", err: `--kill item 1 "server": no @`},
		{name: "no unit", evict: "worker@3", err: `--evict item 1 "worker@3": time "3" is not a duration`},
		{name: "bad duration", kill: "worker@soon", err: `--kill item 1 "worker@soon": time "soon"`},
		{name: "negative", kill: "worker@-1s", err: `--kill item 1 "worker@-1s": time "-1s" is negative`},
		{name: "empty item", kill: "server@1s,,worker@2s", err: `--kill item 2 "": empty item`},
		{name: "trailing comma", evict: "server@1s,", err: `--evict item 2 "": empty item`},
		{name: "empty role", kill: "@1s", err: `--kill item 1 "@1s": unknown role ""`},
		{name: "empty time", kill: "server@", err: `--kill item 1 "server@": time ""`},
		{name: "two ats", kill: "server@1s@2s", err: `time "1s@2s"`},
		{name: "count not supported", kill: "2*server@1s", err: `unknown role "2*server"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSchedule(tc.kill, tc.evict)
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
