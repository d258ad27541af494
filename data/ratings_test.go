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
		{"NaN rating", "1 1 3\r\n2 2 NaN\r\n", 2, `rating "NaN" is not finite`},
		{"word rating", "1 1 good\n", 1, `rating "good" is not a number`},
		{"bad timestamp", "1 1 3 12:00\n", 1, `timestamp "12:00" is neither a non-negative integer nor a date (YYYY-MM-DD)`},
		{"bad date", "1,1,3,2005-9-6\n", 1, `timestamp "2005-9-6" is neither`},
		{"netflix item too large", "4294967296:\n1,3,2005-09-06\n", 1, `item id "4294967296" does not fit in 32 bits`},
		{"netflix rating without an item", "1,1,3\n2:\n1,3\n", 2, `item line "2:" in a file that did not start with one`},
		{"netflix line of four fields", "1:\n1,3,2005-09-06,x\n", 2, "4 fields, want user,rating[,date] after an item line"},
		{"netflix bad rating", "1:\n1488844,3,2005-09-06\n822109,five,2005-05-13\n", 3, `rating "five" is not a number`},
		{"empty csv field", "1,,3\n", 1, "empty item id"},
		{"header not first", "1,2,3\nuserId,movieId,rating\n", 2, `rating "rating" is not a number`},
		{"header with a number", "user 2 rating\n", 1, `rating "rating" is not a number`},
		{"empty quoted id", "a,b,1\n\"\",b,1\n", 2, "empty user id"},
		{"quote not closed", "\"276725\";\"034545104X\";\"0\n", 1, "field 3: a quote that is not closed"},
		{"text after a quote", "\"276725\"x;\"034545104X\";\"0\"\n", 1, `field 1: text "x" after a closing quote`},
		{"control character", "u1 i1 1\nu\x01 i1 1\n", 2, `user id "u\x01" holds a control character`},
		{"tab in a quoted id", "\"u\t1\",i1,1\n", 1, `user id "u\t1" holds a control character`},
		{"bad date and time", "u,i,3,2018-07-07 22h09\n", 1, `timestamp "2018-07-07 22h09" is neither`},
		{"csv trailing comma", "1,2,3,4,\n", 1, "5 fields"},
		{"single colon", "1:2:3\n", 1, "1 fields"},
		{"double colon missing field", "1::2\n", 1, "2 fields"},
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

// TestParseRatingsStringIDs: a column whose ids are not all numbers is
// numbered densely in the order its ids first occur, whatever the
// numbers before the first id that is not one; a column of numbers is
// kept as given, leading zeros and all.
func TestParseRatingsStringIDs(t *testing.T) {
	for _, tc := range []struct {
		name               string
		in                 string
		users, items       []uint32
		values             []float32
		userIDs, itemIDs   []string // nil: numbers kept as given
		numUsers, numItems int
	}{
		{"amazon", "AKM1MP6P0OYPR,0132793040,5.0,1365811200\nA2CX7LUOHB2NDG,B00004Y2UT,4.0,1341100800\nAKM1MP6P0OYPR,B00004Y2UT,3.0,1367193600\n",
			[]uint32{0, 1, 0}, []uint32{0, 1, 1}, []float32{5, 4, 3},
			[]string{"AKM1MP6P0OYPR", "A2CX7LUOHB2NDG"}, []string{"0132793040", "B00004Y2UT"}, 2, 2},
		{"numbers, then an id that is not one", "1 10 5\n2 20 4\n3 x 3\n1 10 2\n",
			[]uint32{1, 2, 3, 1}, []uint32{0, 1, 2, 0}, []float32{5, 4, 3, 2},
			nil, []string{"10", "20", "x"}, 4, 3},
		{"an id with leading zeros, then one that is not a number", "1 1400532655 4\n2 0321719816 2\n3 B0000E1717 1\n4 0321719816 5\n",
			[]uint32{1, 2, 3, 4}, []uint32{0, 1, 2, 1}, []float32{4, 2, 1, 5},
			nil, []string{"1400532655", "0321719816", "B0000E1717"}, 5, 3},
		{"numbers with leading zeros", "007 1 5\n7 2 4\n0 03 1\n",
			[]uint32{7, 7, 0}, []uint32{1, 2, 3}, []float32{5, 4, 1}, nil, nil, 8, 4},
		{"book-crossing", "\"User-ID\";\"ISBN\";\"Book-Rating\"\n\"276725\";\"034545104X\";\"0\"\n\"276726\";\"0155061224\";\"5\"\n",
			[]uint32{276725, 276726}, []uint32{0, 1}, []float32{0, 5},
			nil, []string{"034545104X", "0155061224"}, 276727, 2},
		{"separators and quotes inside quotes", "\"a,b\";\"x\"\"y\";3\n \"a,b\" , z , 4 \n",
			[]uint32{0, 0}, []uint32{0, 1}, []float32{3, 4}, []string{"a,b"}, []string{`x"y`, "z"}, 1, 2},
		{"yelp, with a header", "user_id,business_id,stars,date\n-0Ym1Wg3bXd_TDz8OmpkSA,XQfwVwDr-v0ZS3_CbbE5Xw,3.0,2018-07-07 22:09:11\n" +
			"OyoGAe7OKpv6SyGZT5g77Q,XQfwVwDr-v0ZS3_CbbE5Xw,5,2012-01-03T15:28:18Z\n",
			[]uint32{0, 1}, []uint32{0, 0}, []float32{3, 5},
			[]string{"-0Ym1Wg3bXd_TDz8OmpkSA", "OyoGAe7OKpv6SyGZT5g77Q"}, []string{"XQfwVwDr-v0ZS3_CbbE5Xw"}, 2, 1},
		{"quoted fields between spaces", "\"u1\" \"7\" 4\n",
			[]uint32{0}, []uint32{7}, []float32{4}, []string{"u1"}, nil, 1, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseRatings(strings.NewReader(tc.in), "in")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(r.Users, tc.users) || !slices.Equal(r.Items, tc.items) || !slices.Equal(r.Values, tc.values) {
				t.Errorf("got users %v items %v values %v, want %v %v %v", r.Users, r.Items, r.Values, tc.users, tc.items, tc.values)
			}
			if got := idsOf(r.UserIDs); !slices.Equal(got, tc.userIDs) {
				t.Errorf("user ids %q, want %q", got, tc.userIDs)
			}
			if got := idsOf(r.ItemIDs); !slices.Equal(got, tc.itemIDs) {
				t.Errorf("item ids %q, want %q", got, tc.itemIDs)
			}
			if r.NumUsers != tc.numUsers || r.NumItems != tc.numItems {
				t.Errorf("NumUsers, NumItems = %d, %d, want %d, %d", r.NumUsers, r.NumItems, tc.numUsers, tc.numItems)
			}
		})
	}
}

// idsOf lists d's ids by number; nil for nil.
func idsOf(d *IDs) []string {
	if d == nil {
		return nil
	}
	out := make([]string, d.Len())
	for n := range out {
		out[n] = d.ID(uint32(n))
	}
	return out
}

// TestReadRatingsFixtures reads the shipped files of Amazon's, Yelp's
// and Book-Crossing's shapes.
func TestReadRatingsFixtures(t *testing.T) {
	for _, tc := range []struct {
		path             string
		rows             int
		users, items     int // distinct; 0: numbers kept as given
		numUsers, lo, hi float64
	}{
		{"testdata/amazon.ratings.csv", 30, 8, 7, 8, 1, 5},
		{"testdata/bx.ratings.csv", 24, 0, 9, 276745, 0, 10},
		{"testdata/yelp.ratings.csv", 12, 6, 5, 6, 1, 5},
	} {
		r, err := ReadRatings(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if r.Len() != tc.rows || len(idsOf(r.UserIDs)) != tc.users || len(idsOf(r.ItemIDs)) != tc.items || r.NumUsers != int(tc.numUsers) {
			t.Errorf("%s: %d rows, %d user ids, %d item ids, NumUsers %d; want %d, %d, %d, %v",
				tc.path, r.Len(), len(idsOf(r.UserIDs)), len(idsOf(r.ItemIDs)), r.NumUsers, tc.rows, tc.users, tc.items, tc.numUsers)
		}
		if lo, hi := r.Range(); float64(lo) != tc.lo || float64(hi) != tc.hi {
			t.Errorf("%s: range %v-%v, want %v-%v", tc.path, lo, hi, tc.lo, tc.hi)
		}
	}
}

// TestReadRatingsWith: a test file read with its training file's
// dictionaries gives every id the training's number, and Unseen to the
// ids training never had; a column of numbers in training refuses one
// that is not.
func TestReadRatingsWith(t *testing.T) {
	train, err := ReadRatings("testdata/amazon.ratings.csv")
	if err != nil {
		t.Fatal(err)
	}
	test, err := ReadRatingsWith("testdata/amazon.test.csv", train.UserIDs, train.ItemIDs)
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile("testdata/amazon.test.csv")
	if err != nil {
		t.Fatal(err)
	}
	unseen := 0
	for i, line := range strings.Split(strings.TrimSpace(string(text)), "\n") {
		f := strings.Split(line, ",")
		for _, c := range []struct {
			id   string
			num  uint32
			dict *IDs
		}{{f[0], test.Users[i], train.UserIDs}, {f[1], test.Items[i], train.ItemIDs}} {
			want, ok := c.dict.Lookup([]byte(c.id))
			if !ok {
				want = Unseen
				unseen++
			}
			if c.num != want {
				t.Errorf("line %d: %q numbered %d, want %d", i+1, c.id, c.num, want)
			}
		}
	}
	if unseen != 4 {
		t.Errorf("%d unseen ids, want the fixture's 4", unseen)
	}
	if test.UserIDs != train.UserIDs || test.NumUsers != 8 || test.NumItems != 7 {
		t.Errorf("the test's dictionary %p (training's %p), NumUsers %d, NumItems %d; want the training's, 8, 7",
			test.UserIDs, train.UserIDs, test.NumUsers, test.NumItems)
	}
	for _, tc := range []struct{ in, reason string }{
		{"1 2 3\n\nx 2 3\n", `user id "x" is not a non-negative integer (the training data's user ids are all numbers)`},
		{"1 -2 3\n", `item id "-2" is not a non-negative integer`},
		{"4294967296 1 3\n", `user id "4294967296" does not fit in 32 bits`},
	} {
		r, err := ParseRatingsWith(strings.NewReader(tc.in), "u1.test", nil, nil)
		checkLineError(t, r, err, "u1.test", strings.Count(tc.in, "\n"), tc.reason)
	}
}

// TestNumberingIsTheFiles: two reads of one file number its ids alike
// (each dictionary hashes with its own seed), so every worker of a job
// arrives at the same numbering without a word to the others.
func TestNumberingIsTheFiles(t *testing.T) {
	var b strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&b, "U%07d,I%05d,%d\n", (i*7919)%3001, (i*104729)%997, 1+i%5)
	}
	a, err := ParseRatings(strings.NewReader(b.String()), "a")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseRatings(strings.NewReader(b.String()), "a")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Users, c.Users) || !slices.Equal(a.Items, c.Items) {
		t.Fatal("two reads of one file numbered its ids differently")
	}
	// Order of first appearance: the first line's user is 0, the next
	// new one 1.
	if a.Users[0] != 0 || a.Users[1] != 1 || a.UserIDs.ID(1) != "U0001917" {
		t.Errorf("users %v..., id 1 %q; want 0, 1, \"U0007919\"", a.Users[:2], a.UserIDs.ID(1))
	}
}

// BenchmarkParseRatings parses 100,000 lines of ratings.csv (ids kept as
// numbers) and of Amazon's shape (string ids, numbered by dictionary).
func BenchmarkParseRatings(b *testing.B) {
	for _, tc := range []struct {
		name string
		line func(u, i int) string
	}{
		{"numbers", func(u, i int) string { return fmt.Sprintf("%d,%d,4.0,1365811200\n", u, i) }},
		{"strings", func(u, i int) string { return fmt.Sprintf("A%013d,B%09d,4.0,1365811200\n", u*7919, i*104729) }},
	} {
		var in strings.Builder
		for j := range 100_000 {
			in.WriteString(tc.line((j*31)%20000, (j*17)%10000))
		}
		text := in.String()
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				if _, err := ParseRatings(strings.NewReader(text), "in"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
