package tier

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestParseByClass(t *testing.T) {
	def := ByClass{Reliable: 1, Transient: 2}
	for _, tc := range []struct {
		in      string
		want    ByClass
		wantErr string
	}{
		{in: "", want: def},
		{in: "reliable=100,transient=1000", want: ByClass{100, 1000}},
		{in: "transient=0.5", want: ByClass{1, 0.5}},
		{in: " reliable = 3 ", want: ByClass{3, 2}},
		{in: "spot=3", wantErr: `--x item 1: "spot": unknown class`},
		{in: "reliable=1,transient", wantErr: `--x item 2 "transient": want CLASS=VALUE`},
		{in: "reliable=-1", wantErr: `--x item 1 "reliable=-1": want a finite number >= 0`},
		{in: "reliable=NaN", wantErr: "want a finite number"},
		{in: "reliable=Inf", wantErr: "want a finite number"},
		{in: "reliable=abc", wantErr: "want a finite number"},
		{in: "reliable=1,reliable=2", wantErr: "--x item 2: class reliable given twice"},
	} {
		got, err := ParseByClass("--x", tc.in, def)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %v, %v; want %v", tc.in, got, err, tc.want)
		}
		back, err := ParseByClass("--x", got.String(), ByClass{})
		if err != nil || back != got {
			t.Errorf("%q: String %q reads back as %v, %v", tc.in, got.String(), back, err)
		}
	}
	if _, err := ParseByClass("--x", "bad=1", def); !errors.Is(err, ErrUnknownClass) {
		t.Errorf("unknown class: %v does not wrap ErrUnknownClass", err)
	}
}

func TestStageFormable(t *testing.T) {
	for _, tc := range []struct {
		s         Stage
		rel, tran int
		ok        bool
	}{
		{Stage1, 1, 0, true}, {Stage1, 0, 3, false},
		{Stage2, 1, 1, true}, {Stage2, 2, 0, false},
		{Stage3, 1, 1, true}, {Stage3, 3, 0, false}, {Stage3, 0, 3, false},
		{Stage(4), 3, 3, false},
	} {
		if err := tc.s.Formable(tc.rel, tc.tran); (err == nil) != tc.ok {
			t.Errorf("stage %d with %d reliable, %d transient: %v", tc.s, tc.rel, tc.tran, err)
		}
	}
	for _, in := range []string{"0", "4", "257", "-1", "x", ""} {
		if _, err := ParseStage(in); !errors.Is(err, ErrUnknownStage) {
			t.Errorf("ParseStage(%q): %v", in, err)
		}
	}
	if s, err := ParseStage("3"); err != nil || s != Stage3 {
		t.Errorf("ParseStage(3) = %v, %v", s, err)
	}
}

func TestClassJSON(t *testing.T) {
	b, err := json.Marshal(map[string]Class{"a": Reliable, "b": Transient})
	if err != nil || string(b) != `{"a":"reliable","b":"transient"}` {
		t.Fatalf("marshal: %s, %v", b, err)
	}
	var c Class
	if err := json.Unmarshal([]byte(`"transient"`), &c); err != nil || c != Transient {
		t.Fatalf("unmarshal: %v, %v", c, err)
	}
	if err := json.Unmarshal([]byte(`"spot"`), &c); !errors.Is(err, ErrUnknownClass) {
		t.Fatalf("unmarshal spot: %v", err)
	}
}
