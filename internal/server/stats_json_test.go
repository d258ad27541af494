package server

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestStatsJSONHasNoSentinel(t *testing.T) {
	b, err := json.Marshal(Stats{Pushes: 3, MinClock: math.MaxInt64})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "9223372036854775807") || !strings.Contains(string(b), `"pushes":3`) {
		t.Fatalf("stats JSON %s: want snake_case keys and no MaxInt64 sentinel", b)
	}
	b, _ = json.Marshal(Stats{MinClock: 7})
	if !strings.Contains(string(b), `"min_clock":7`) {
		t.Fatalf("stats JSON %s: want min_clock 7", b)
	}
}
