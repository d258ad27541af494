package ps

import (
	"slices"
	"testing"

	"github.com/terrace-ml/terrace/internal/placement/layout"
)

// TestPeerGroupSkipsFinished: a worker reports to the next ranks after
// its own, passing over ranks the layout lists as finished (a dead or
// departed worker takes no work, and its messages would only be dropped),
// and re-forms its group when the layout changes.
func TestPeerGroupSkipsFinished(t *testing.T) {
	c := bareClient(newFakeCoord(1), 3)
	rr := &reassigner{c: c, o: Reassign{Group: 3}}
	for _, tc := range []struct {
		workers  int
		finished []int
		want     []int
	}{
		{5, nil, []int{4, 0, 1}},
		{5, []int{4, 0}, []int{1, 2}},
		{5, []int{0, 1, 2, 4}, nil},
		{4, []int{0}, []int{1, 2}},
	} {
		c.lay = &layout.Layout{Workers: tc.workers, Finished: tc.finished}
		if got := rr.group(); !slices.Equal(got, tc.want) {
			t.Errorf("rank 3 of %d workers, %v finished: group %v, want %v", tc.workers, tc.finished, got, tc.want)
		}
	}
}
