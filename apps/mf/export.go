package mf

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
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
// the training ratings' range (global.tsv's min and max).
func (m *model) export(ctx context.Context, dir string) error {
	return Export(dir, m.train, m.k, func(keys []uint64, f, b []float32) error {
		return ps.All(m.factors.Pull(keys, f), m.bias.Pull(keys, b)).Wait(ctx)
	})
}

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
	for i, k := range keys {
		w := files[k&1] // users are even keys, items odd
		w.WriteString(strconv.FormatUint(k>>1, 10))
		w.WriteString("\t" + strconv.FormatFloat(float64(b[i]), 'g', -1, 32))
		for _, v := range f[i*rank : (i+1)*rank] {
			w.WriteString("\t" + strconv.FormatFloat(float64(v), 'g', -1, 32))
		}
		w.WriteByte('\n')
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
	return os.WriteFile(filepath.Join(dir, "global.tsv"), fmt.Appendf(nil, "mean\t%g\nmin\t%g\nmax\t%g\n", float32(train.Mean()), lo, hi), 0o644)
}

// ErrModel: a model directory's file is not one export wrote (cut
// short, or of rows of different widths).
var ErrModel = errors.New("not a whole model file")

// Model is an exported model read back (LoadModel): biases and factors
// by user and item id, the mean rating and the ratings' range.
type Model struct {
	Mean, Min, Max float64
	Users, Items   map[uint32][]float64 // bias, then the factors
}

// LoadModel reads a model that export wrote to dir. Every row of
// users.tsv and items.tsv has the same number of values, and each file
// ends with a whole line: a file cut short (a copy that failed, a full
// disk) is refused, naming the file and the line, rather than read as
// a model whose missing users and items predict the mean.
func LoadModel(dir string) (*Model, error) {
	m := &Model{}
	g, err := os.ReadFile(filepath.Join(dir, "global.tsv"))
	if err != nil {
		return nil, fmt.Errorf("mf: model: %w", err)
	}
	// A model exported before the range was recorded has the mean line
	// alone; it was trained on MovieLens's 1-5 scale, which the
	// predictions were then clipped to.
	m.Min, m.Max = 1, 5
	n, err := fmt.Sscanf(string(g), "mean\t%g\nmin\t%g\nmax\t%g", &m.Mean, &m.Min, &m.Max)
	if oldFormat := n == 1 && strings.Count(string(g), "\n") <= 1; err != nil && !oldFormat {
		return nil, fmt.Errorf("mf: model %s/global.tsv: %w", dir, err)
	}
	width := 0
	for _, t := range []struct {
		name string
		dst  *map[uint32][]float64
	}{{"users.tsv", &m.Users}, {"items.tsv", &m.Items}} {
		rows, err := readTSV(filepath.Join(dir, t.name), &width)
		if err != nil {
			return nil, err
		}
		*t.dst = rows
	}
	return m, nil
}

// readTSV reads the rows of path, each an id and *width values (set by
// the first row read if 0).
func readTSV(path string, width *int) (map[uint32][]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("mf: model: %w", err)
	}
	defer f.Close()
	out := map[uint32][]float64{}
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
		fields := strings.Split(strings.TrimSuffix(line, "\n"), "\t")
		if *width == 0 {
			*width = len(fields) - 1
		}
		if len(fields)-1 != *width || *width == 0 {
			return nil, fmt.Errorf("mf: model %s:%d: %w: %d values, not %d", path, n, ErrModel, len(fields)-1, *width)
		}
		id, err := strconv.ParseUint(fields[0], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("mf: model %s:%d: %w", path, n, err)
		}
		vals := make([]float64, *width)
		for i, field := range fields[1:] {
			if vals[i], err = strconv.ParseFloat(field, 64); err != nil {
				return nil, fmt.Errorf("mf: model %s:%d: %w", path, n, err)
			}
		}
		out[uint32(id)] = vals
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("mf: model %s: %w: no rows", path, ErrModel)
	}
	return out, nil
}

// Predict is the model's rating of item by user, clipped to the training
// ratings' range; an
// unknown user or item counts with bias and factors 0.
func (m *Model) Predict(user, item uint32) float64 {
	p := m.Mean
	u, it := m.Users[user], m.Items[item]
	if len(u) > 0 {
		p += u[0]
	}
	if len(it) > 0 {
		p += it[0]
	}
	if len(u) > 1 && len(it) == len(u) {
		for j := 1; j < len(u); j++ {
			p += u[j] * it[j]
		}
	}
	return min(max(p, m.Min), m.Max)
}
