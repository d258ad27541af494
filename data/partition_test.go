package data

import (
	"fmt"
	"testing"
)

func TestPartition(t *testing.T) {
	cases := [][2]int{{0, 1}, {0, 5}, {1, 1}, {1, 3}, {5, 5}, {7, 3}, {10, 4}, {32561, 64}, {100, 1000}}
	g := splitmix64(7)
	for range 500 {
		cases = append(cases, [2]int{int(g.below(10000)), 1 + int(g.below(300))})
	}
	for _, c := range cases {
		n, parts := c[0], c[1]
		ps := Partition(n, parts)
		if len(ps) != parts {
			t.Fatalf("Partition(%d, %d): %d parts", n, parts, len(ps))
		}
		lo, minLen, maxLen := 0, n+1, -1
		for i, p := range ps {
			if p.ID != i || p.Lo != lo || p.Hi < p.Lo || p.Len() != p.Hi-p.Lo {
				t.Fatalf("Partition(%d, %d)[%d] = %+v after %d rows", n, parts, i, p, lo)
			}
			if i > 0 && p.Len() > ps[i-1].Len() {
				t.Fatalf("Partition(%d, %d): part %d larger than part %d", n, parts, i, i-1)
			}
			minLen, maxLen = min(minLen, p.Len()), max(maxLen, p.Len())
			lo = p.Hi
		}
		if lo != n {
			t.Fatalf("Partition(%d, %d) covers [0,%d)", n, parts, lo)
		}
		if maxLen-minLen > 1 {
			t.Fatalf("Partition(%d, %d): sizes from %d to %d", n, parts, minLen, maxLen)
		}
	}
}

func TestPartitionPanics(t *testing.T) {
	for _, c := range [][2]int{{10, 0}, {10, -1}, {-1, 3}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Partition(%d, %d) did not panic", c[0], c[1])
				}
			}()
			Partition(c[0], c[1])
		}()
	}
}

func ExamplePartition() {
	for _, p := range Partition(10, 4) {
		fmt.Println(p, p.Len())
	}
	// Output:
	// part 0 [0,3) 3
	// part 1 [3,6) 3
	// part 2 [6,8) 2
	// part 3 [8,10) 2
}
