package mf

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/ps"
)

// export writes the model to dir as TSV, which any tool reads: users.tsv
// and items.tsv hold "id bias f1 ... fk" for every user and item of the
// training data, global.tsv the mean rating; a rating is predicted as
// mean + user bias + item bias + the factors' dot product, clipped to
// the training ratings' range (global.tsv's min and max). The format is
// docs/format/mf.md.
func (m *model) export(ctx context.Context, dir string) error {
	return Export(dir, m.train, m.k, func(keys []uint64, f, b []float32) error {
		return ps.All(m.factors.Pull(keys, f), m.bias.Pull(keys, b)).Wait(ctx)
	})
}

// FormatVersion is the version of the model directory Export writes
// (docs/format/mf.md): 2 names its ids' kind in global.tsv, whose users
// and items may be strings (Amazon's, Book-Crossing's). Version 1 files
// (mean, min and max) and version 0 ones (the mean alone) have numbers.
const FormatVersion = 2

// Export writes the model of a job trained on train with rank factors to
// dir, as a job's --model does; read fills the factors (rank a key) and
// biases of keys, from the servers (FactorsTable and BiasTable) or from a
// checkpoint of them (terrace export).
func Export(dir string, train *data.Ratings, rank int, read func(keys []uint64, factors, biases []float32) error) error {
	all := make([]int, train.Len())
	for i := range all {
		all[i] = i
	}
	keys := ratingKeys(train, all)
	f, b := make([]float32, len(keys)*rank), make([]float32, len(keys))
	if err := read(keys, f, b); err != nil {
		return fmt.Errorf("mf: export: read model: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("mf: export: %w", err)
	}
	files := map[uint64]*bufio.Writer{}
	var closers []*os.File
	for kind, name := range []string{"users.tsv", "items.tsv"} {
		fh, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("mf: export: %w", err)
		}
		closers = append(closers, fh)
		files[uint64(kind)] = bufio.NewWriter(fh)
	}
	dicts := [2]*data.IDs{train.UserIDs, train.ItemIDs}
	var line []byte
	var rows [2]int
	for i, k := range keys {
		rows[k&1]++
		// Users are even keys, items odd; a string id is written as it
		// was read, which the parser made sure holds no tab or newline.
		if d := dicts[k&1]; d != nil {
			line = append(line[:0], d.ID(uint32(k>>1))...)
		} else {
			line = strconv.AppendUint(line[:0], k>>1, 10)
		}
		line = append(line, '\t')
		line = strconv.AppendFloat(line, float64(b[i]), 'g', -1, 32)
		for _, v := range f[i*rank : (i+1)*rank] {
			line = append(line, '\t')
			line = strconv.AppendFloat(line, float64(v), 'g', -1, 32)
		}
		files[k&1].Write(append(line, '\n'))
	}
	for i, fh := range closers {
		if err := files[uint64(i)].Flush(); err != nil {
			fh.Close()
			return fmt.Errorf("mf: export: %w", err)
		}
		if err := fh.Close(); err != nil {
			return fmt.Errorf("mf: export: %w", err)
		}
	}
	lo, hi := train.Range()
	global := fmt.Appendf(nil, "version\t%d\nmean\t%g\nmin\t%g\nmax\t%g\nusers\t%s\nitems\t%s\nuser_rows\t%d\nitem_rows\t%d\n",
		FormatVersion, float32(train.Mean()), lo, hi, idKind(train.UserIDs), idKind(train.ItemIDs), rows[0], rows[1])
	return os.WriteFile(filepath.Join(dir, "global.tsv"), global, 0o644)
}

// idKind names the kind of a column's ids in global.tsv.
func idKind(ids *data.IDs) string {
	if ids != nil {
		return "strings"
	}
	return "numbers"
}

// ErrModel: a model directory's file is not one export wrote (cut
// short, or of rows of different widths).
var ErrModel = errors.New("not a whole model file")

// Model is an exported model read back (LoadModel): biases and factors
// by user and item number, the mean rating and the ratings' range.
type Model struct {
	Mean, Min, Max float64
	Users, Items   map[uint32][]float32 // bias, then the factors
	// UserIDs and ItemIDs number the users and items when the model's
	// ids are strings (nil: numbers, the keys of Users and Items): read
	// ratings to score with data.ReadRatingsWith(path, UserIDs, ItemIDs).
	UserIDs, ItemIDs *data.IDs
}

// LoadModel reads a model that export wrote to dir, of any format
// version. Every row of users.tsv and items.tsv has the same number of
// finite values, each id once, and each file ends with a whole line and
// holds as many rows as global.tsv says (when it says: user_rows and
// item_rows): a file cut short (a copy that failed, a full disk), even
// at a line's end, is refused, naming the file, rather than read as a
// model whose missing users and items predict the mean.
func LoadModel(dir string) (*Model, error) {
	m := &Model{}
	strs, rows, err := m.readGlobal(filepath.Join(dir, "global.tsv"))
	if err != nil {
		return nil, err
	}
	width := 0
	for i, t := range []struct {
		name string
		dst  *map[uint32][]float32
		ids  **data.IDs
	}{{"users.tsv", &m.Users, &m.UserIDs}, {"items.tsv", &m.Items, &m.ItemIDs}} {
		if strs[i] {
			*t.ids = &data.IDs{}
		}
		path := filepath.Join(dir, t.name)
		got, err := readTSV(path, &width, *t.ids)
		if err != nil {
			return nil, err
		}
		if rows[i] >= 0 && len(got) != rows[i] {
			return nil, fmt.Errorf("mf: model %s: %w: %d rows, global.tsv says %d", path, ErrModel, len(got), rows[i])
		}
		*t.dst = got
	}
	return m, nil
}

// readGlobal reads global.tsv, "key value" lines, into m and returns
// whether the users' and the items' ids are strings, and how many rows
// users.tsv and items.tsv hold (-1: not said, as before the fourteenth
// session; lines end in \n or \r\n). A model exported
// before the range was recorded (version 0) has the mean line alone; it
// was trained on MovieLens's 1-5 scale, which the predictions were then
// clipped to. One without a version line is version 0 or 1, of numbers.
func (m *Model) readGlobal(path string) (strs [2]bool, rows [2]int, err error) {
	rows = [2]int{-1, -1}
	g, err := os.ReadFile(path)
	if err != nil {
		return strs, rows, fmt.Errorf("mf: model: %w", err)
	}
	m.Min, m.Max = 1, 5
	seen := map[string]bool{}
	for n, line := range strings.Split(strings.TrimSuffix(string(g), "\n"), "\n") {
		key, val, ok := strings.Cut(strings.TrimSuffix(line, "\r"), "\t")
		if !ok {
			return strs, rows, fmt.Errorf("mf: model %s:%d: %w: %q is not a key, a tab and a value", path, n+1, ErrModel, line)
		}
		if seen[key] {
			return strs, rows, fmt.Errorf("mf: model %s:%d: %w: %s again", path, n+1, ErrModel, key)
		}
		seen[key] = true
		switch key {
		case "version":
			v, err := strconv.Atoi(val)
			if err != nil || v < 0 || v > FormatVersion {
				return strs, rows, fmt.Errorf("mf: model %s:%d: %w %q (this terrace reads versions 0 to %d: a newer one wrote it?)", path, n+1, ErrVersion, val, FormatVersion)
			}
		case "mean", "min", "max":
			// Written from float32s, whose shortest forms read back
			// exactly as float32s.
			v, err := strconv.ParseFloat(val, 32)
			if err != nil {
				return strs, rows, fmt.Errorf("mf: model %s:%d: %s: %w", path, n+1, key, err)
			}
			switch key {
			case "mean":
				m.Mean = v
			case "min":
				m.Min = v
			default:
				m.Max = v
			}
		case "user_rows", "item_rows":
			v, err := strconv.Atoi(val)
			if err != nil || v < 0 {
				return strs, rows, fmt.Errorf("mf: model %s:%d: %w: %s %q", path, n+1, ErrModel, key, val)
			}
			if key == "user_rows" {
				rows[0] = v
			} else {
				rows[1] = v
			}
		case "users", "items":
			if val != "strings" && val != "numbers" {
				return strs, rows, fmt.Errorf("mf: model %s:%d: %w: %s are %q, not strings or numbers", path, n+1, ErrModel, key, val)
			}
			if key == "users" {
				strs[0] = val == "strings"
			} else {
				strs[1] = val == "strings"
			}
		}
	}
	if !seen["mean"] {
		return strs, rows, fmt.Errorf("mf: model %s: %w: no mean", path, ErrModel)
	}
	return strs, rows, nil
}

// ErrVersion: a model directory's global.tsv names a format version this
// build does not read.
var ErrVersion = errors.New("unknown format version")

// readTSV reads the rows of path, each an id and *width values (set by
// the first row read if 0). The ids are numbers, or with ids given
// strings numbered into it in the order of the rows.
func readTSV(path string, width *int, ids *data.IDs) (map[uint32][]float32, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("mf: model: %w", err)
	}
	defer f.Close()
	out := map[uint32][]float32{}
	r := bufio.NewReader(f)
	for n := 1; ; n++ {
		line, err := r.ReadString('\n')
		if err == io.EOF && line == "" {
			break
		}
		if err == io.EOF {
			return nil, fmt.Errorf("mf: model %s:%d: %w: the last line has no end", path, n, ErrModel)
		}
		if err != nil {
			return nil, fmt.Errorf("mf: model %s:%d: %w", path, n, err)
		}
		fields := strings.Split(strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r"), "\t")
		if *width == 0 {
			*width = len(fields) - 1
		}
		if len(fields)-1 != *width || *width == 0 {
			return nil, fmt.Errorf("mf: model %s:%d: %w: %d values, not %d", path, n, ErrModel, len(fields)-1, *width)
		}
		var id uint32
		if ids != nil {
			before := ids.Len()
			if id, _ = ids.Add([]byte(fields[0])); ids.Len() == before {
				return nil, fmt.Errorf("mf: model %s:%d: %w: id %q again", path, n, ErrModel, fields[0])
			}
		} else {
			v, err := strconv.ParseUint(fields[0], 10, 32)
			if err != nil {
				return nil, fmt.Errorf("mf: model %s:%d: %w", path, n, err)
			}
			id = uint32(v)
			if _, again := out[id]; again {
				return nil, fmt.Errorf("mf: model %s:%d: %w: id %d again", path, n, ErrModel, id)
			}
		}
		vals := make([]float32, *width)
		for i, field := range fields[1:] {
			v, err := strconv.ParseFloat(field, 32)
			if err != nil {
				return nil, fmt.Errorf("mf: model %s:%d: %w", path, n, err)
			}
			// Servers refuse non-finite updates, so no job exports one.
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("mf: model %s:%d: %w: value %d is %s", path, n, ErrModel, i+1, field)
			}
			vals[i] = float32(v)
		}
		out[id] = vals
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("mf: model %s: %w: no rows", path, ErrModel)
	}
	return out, nil
}

// Predict is the model's rating of item by user, clipped to the training
// ratings' range, computed as the job's evaluation computes it; an
// unknown user or item (data.Unseen among them) counts with bias and
// factors 0.
func (m *Model) Predict(user, item uint32) float64 {
	var bu, bi float32
	var pu, qi []float32
	if u := m.Users[user]; len(u) > 0 {
		bu, pu = u[0], u[1:]
	}
	if it := m.Items[item]; len(it) > 0 {
		bi, qi = it[0], it[1:]
	}
	if len(pu) == 0 || len(pu) != len(qi) {
		pu, qi = nil, nil
	}
	return float64(predict(float32(m.Mean), bu, bi, pu, qi, float32(m.Min), float32(m.Max)))
}
