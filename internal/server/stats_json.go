package server

import (
	"encoding/json"
	"math"
)

// MarshalJSON leaves min_clock out while no worker counts: its sentinel,
// math.MaxInt64, read as a clock in reports.
func (s Stats) MarshalJSON() ([]byte, error) {
	type plain Stats
	if s.MinClock != math.MaxInt64 {
		return json.Marshal(plain(s))
	}
	return json.Marshal(struct {
		plain
		MinClock *int64 `json:"min_clock,omitempty"`
	}{plain: plain(s)})
}
