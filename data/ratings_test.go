package data

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestReadMovieLens(t *testing.T) {
	path, ok := SharedPath("ratings/ml-100k/u1.base")
	if !ok {
		t.Skip("MovieLens 100K not found at ../shared/data/ratings/ml-100k/u1.base (it may not be redistributed, so a plain clone lacks it); skipping")
	}
	r, err := ReadRatings(path)
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != 80000 || len(r.Users) != 80000 || len(r.Items) != 80000 {
		t.Fatalf("Len() = %d (%d users, %d items), want 80000", r.Len(), len(r.Users), len(r.Items))
	}
	// Ids count from 1: 943 users and 1682 movies, of which 1650 appear
	// in this training split.
	if r.NumUsers != 944 || r.NumItems != 1683 {
		t.Errorf("NumUsers, NumItems = %d, %d, want 944, 1683", r.NumUsers, r.NumItems)
	}
	users, items := map[uint32]bool{}, map[uint32]bool{}
	for i := range r.Len() {
		users[r.Users[i]], items[r.Items[i]] = true, true
	}
	if len(users) != 943 || len(items) != 1650 {
		t.Errorf("%d distinct users, %d distinct items, want 943, 1650", len(users), len(items))
	}
	if got, want := r.Mean(), 282268.0/80000; math.Abs(got-want) > 1e-12 {
		t.Errorf("Mean() = %v, want %v", got, want)
	}
	if r.Users[0] != 1 || r.Items[0] != 1 || r.Values[0] != 5 {
		t.Errorf("first rating (%d, %d, %v), want (1, 1, 5)", r.Users[0], r.Items[0], r.Values[0])
	}
	if n := r.Len() - 1; r.Users[n] != 943 || r.Items[n] != 1330 || r.Values[n] != 3 {
		t.Errorf("last rating (%d, %d, %v), want (943, 1330, 3)", r.Users[n], r.Items[n], r.Values[n])
	}
}

func TestParseRatings(t *testing.T) {
	var maxID uint64 = math.MaxUint32
	maxIDs := int(maxID + 1) // not a constant, which would not compile on 32-bit platforms
	for _, tc := range []struct {
		name               string
		in                 string
		users, items       []uint32
		values             []float32
		numUsers, numItems int
	}{
		{"empty", "", nil, nil, nil, 0, 0},
		{"tabs with timestamps", "1\t2\t5\t874965758\n3\t1\t1\t874965759\n",
			[]uint32{1, 3}, []uint32{2, 1}, []float32{5, 1}, 4, 3},
		{"spaces without timestamps", "0 0 2.5\n  7   9   4  \n",
			[]uint32{0, 7}, []uint32{0, 9}, []float32{2.5, 4}, 8, 10},
		{"csv with header", "userId,movieId,rating,timestamp\n1,31,2.5,1260759144\n1, 1029 ,3.0,1260759179\n",
			[]uint32{1, 1}, []uint32{31, 1029}, []float32{2.5, 3}, 2, 1030},
		{"double colons (MovieLens 1M)", "1::1193::5::978300760\r\n6040:: 1097 ::4::956715569\n",
			[]uint32{1, 6040}, []uint32{1193, 1097}, []float32{5, 4}, 6041, 1194},
		{"crlf and blank lines", "\r\n1 2 3\r\n\r\n\t\n4 5 1\r\n",
			[]uint32{1, 4}, []uint32{2, 5}, []float32{3, 1}, 5, 6},
		{"header after blank lines", "\n\nuser item rating\n1 1 1\n",
			[]uint32{1}, []uint32{1}, []float32{1}, 2, 2},
		{"netflix prize (combined_data_1.txt, crlf)", "1:\r\n1488844,3,2005-09-06\r\n822109,5,2005-05-13\r\n\r\n10:\r\n1488844,4,2005-10-01\r\n",
			[]uint32{1488844, 822109, 1488844}, []uint32{1, 1, 10}, []float32{3, 5, 4}, 1488845, 11},
		{"netflix prize without dates", "3:\n7,2\n", []uint32{7}, []uint32{3}, []float32{2}, 8, 4},
		{"dates as timestamps", "user,item,rating,date\n1,2,4,2005-09-06\n", []uint32{1}, []uint32{2}, []float32{4}, 2, 3},
		{"largest ids", "4294967295 4294967295 1\n",
			[]uint32{math.MaxUint32}, []uint32{math.MaxUint32}, []float32{1}, maxIDs, maxIDs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseRatings(strings.NewReader(tc.in), "in")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(r.Users, tc.users) || !slices.Equal(r.Items, tc.items) || !slices.Equal(r.Values, tc.values) {
				t.Errorf("got users %v items %v values %v, want %v %v %v", r.Users, r.Items, r.Values, tc.users, tc.items, tc.values)
			}
			if r.NumUsers != tc.numUsers || r.NumItems != tc.numItems {
				t.Errorf("NumUsers, NumItems = %d, %d, want %d, %d", r.NumUsers, r.NumItems, tc.numUsers, tc.numItems)
			}
		})
	}
}

func TestParseRatingsMalformed(t *testing.T) {
	z := gzipped(t, []byte(strings.Repeat("1\t2\t3\t4\n", 1000)))
	for _, tc := range []struct {
		name   string
		in     string
		line   int
		reason string
	}{
		{"too few fields", "1 2 3\n1 2\n", 2, "2 fields, want user item rating [timestamp]"},
		{"too many fields", "1 2 3 4 5\n", 1, "5 fields"},
		{"bad user", "1 2 3\n\nx 2 3\n", 3, `user id "x" is not a non-negative integer`},
		{"negative item", "1 -2 3\n", 1, `item id "-2" is not a non-negative integer`},
		{"user too large", "4294967296 1 3\n", 1, `user id "4294967296" does not fit in 32 bits`},
		{"NaN rating", "1 1 3\r\n2 2 NaN\r\n", 2, `rating "NaN" is not finite`},
		{"word rating", "1 1 good\n", 1, `rating "good" is not a number`},
		{"bad timestamp", "1 1 3 12:00\n", 1, `timestamp "12:00" is neither a non-negative integer nor a date (YYYY-MM-DD)`},
		{"bad date", "1,1,3,2005-9-6\n", 1, `timestamp "2005-9-6" is neither`},
		{"netflix item too large", "4294967296:\n1,3,2005-09-06\n", 1, `item id "4294967296" does not fit in 32 bits`},
		{"netflix rating without an item", "1,1,3\n2:\n1,3\n", 2, `item line "2:" in a file that did not start with one`},
		{"netflix line of four fields", "1:\n1,3,2005-09-06,x\n", 2, "4 fields, want user,rating[,date] after an item line"},
		{"netflix bad rating", "1:\n1488844,3,2005-09-06\n822109,five,2005-05-13\n", 3, `rating "five" is not a number`},
		{"empty csv field", "1,,3\n", 1, `item id "" is not a non-negative integer`},
		{"csv trailing comma", "1,2,3,4,\n", 1, "5 fields"},
		{"single colon", "1:2:3\n", 1, "1 fields"},
		{"double colon missing field", "1::2\n", 1, "2 fields"},
		{"header not first", "1,2,3\nuserId,movieId,rating\n", 2, `user id "userId"`},
		{"header with a number", "user 2 rating\n", 1, `user id "user"`},
		{"truncated gzip", string(z[:len(z)-20]), linesBeforeBreak(t, z[:len(z)-20]), "truncated or corrupt input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const name = "u.data"
			r, err := ParseRatings(strings.NewReader(tc.in), name)
			checkLineError(t, r, err, name, tc.line, tc.reason)
		})
	}
}

func TestReadRatingsFiles(t *testing.T) {
	plain, err := os.ReadFile("testdata/small.ratings.csv")
	if err != nil {
		t.Fatal(err)
	}
	gz := filepath.Join(t.TempDir(), "small.csv")
	if err := os.WriteFile(gz, gzipped(t, plain), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"testdata/small.ratings.csv", gz} {
		r, err := ReadRatings(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if !slices.Equal(r.Users, []uint32{1, 1, 7}) || !slices.Equal(r.Items, []uint32{31, 1029, 3}) ||
			!slices.Equal(r.Values, []float32{2.5, 3, 4.5}) || r.NumUsers != 8 || r.NumItems != 1030 {
			t.Errorf("%s: got %+v", path, r)
		}
		if got := r.Mean(); math.Abs(got-10.0/3) > 1e-12 {
			t.Errorf("%s: Mean() = %v, want 10/3", path, got)
		}
	}
	if got := (&Ratings{}).Mean(); got != 0 {
		t.Errorf("Mean of no ratings = %v, want 0", got)
	}
}

// TestNetflixItemOutlivesItsLine: an item line's id holds for every
// rating after it, however far past the line the reader's buffer has
// moved on (it was kept as a slice of the reused line buffer).
func TestNetflixItemOutlivesItsLine(t *testing.T) {
	var b strings.Builder
	b.WriteString("17770:\n")
	for u := range 20000 {
		fmt.Fprintf(&b, "%d,3,2005-09-06\n", u)
	}
	r, err := ParseRatings(strings.NewReader(b.String()), "mv_0017770.txt")
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range r.Items {
		if it != 17770 {
			t.Fatalf("rating %d: item %d, want 17770", i, it)
		}
	}
}
