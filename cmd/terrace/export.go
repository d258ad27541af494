package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/terrace-ml/terrace/apps/lasso"
	"github.com/terrace-ml/terrace/apps/lda"
	"github.com/terrace-ml/terrace/apps/lr"
	"github.com/terrace-ml/terrace/apps/mf"
	"github.com/terrace-ml/terrace/apps/mlr"
	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/control/coord"
	"github.com/terrace-ml/terrace/internal/server"
	"github.com/terrace-ml/terrace/internal/storage/store"
	"github.com/terrace-ml/terrace/keyspace"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// modelSource is where terrace export reads a job's tables: a live
// cluster's servers, or a committed checkpoint.
type modelSource interface {
	// width is the number of values a key of table name holds.
	width(ctx context.Context, name string) (int, error)
	// read fills dst with the values of keys (sorted), width a key; keys
	// nothing wrote read as their table's initial value.
	read(ctx context.Context, name string, keys []uint64, dst []float32) error
}

// exportModel writes job j's model, read from src, to out: lr, mlr and
// lasso a liblinear model file, nn an nn model file, mf and lda a
// directory of TSV files, as the job's --model writes them.
func exportModel(ctx context.Context, src modelSource, j api.Job, out string) error {
	if j.App != "mf" && j.App != "lda" {
		// Found once the data was read and the tables pulled, and said
		// as "lr: model: open OUT: ...".
		if st, err := os.Stat(out); err == nil && st.IsDir() {
			return fmt.Errorf("--out %s is a directory: an %s model is a file", out, j.App)
		}
		if err := checkOutDir("out", out); err != nil {
			return err
		}
	}
	switch j.App {
	case "lr":
		nkeys, scale, err := lrScaling(j)
		if err != nil {
			return err
		}
		w := make([]float32, nkeys)
		if err := src.read(ctx, lr.TableName, keyRange(nkeys), w); err != nil {
			return err
		}
		return saveLR(lr.NewModel(w, scale), j, out)
	case "mf":
		train, err := data.ReadRatings(j.Train)
		if err != nil {
			return fmt.Errorf("export: the job's training data (its users, items and mean): %w", err)
		}
		if len(train.Values) == 0 {
			return noRows(j)
		}
		rank, err := src.width(ctx, mf.FactorsTable)
		if err != nil {
			return err
		}
		return mf.Export(out, train, rank, func(keys []uint64, f, b []float32) error {
			if err := src.read(ctx, mf.FactorsTable, keys, f); err != nil {
				return err
			}
			return src.read(ctx, mf.BiasTable, keys, b)
		})
	case "lda":
		corpus, err := data.ReadDocWords(j.Train)
		if err != nil {
			return fmt.Errorf("export: the job's training data (its words): %w", err)
		}
		if len(corpus.IDs) == 0 {
			return noRows(j)
		}
		var vocab []string
		if j.Vocab != "" {
			if vocab, err = data.ReadVocab(j.Vocab); err != nil {
				return fmt.Errorf("export: the job's vocabulary: %w", err)
			}
		}
		k, err := src.width(ctx, lda.TableName)
		if err != nil {
			return err
		}
		v := corpus.NumWords
		wk := make([]float32, v*k)
		if err := src.read(ctx, lda.TableName, keyRange(uint64(v)), wk); err != nil {
			return err
		}
		return lda.Export(out, wk, v, k, vocab)
	case "mlr", "nn":
		return exportClasses(ctx, src, j, out)
	case "lasso":
		train, err := data.ReadRegression(j.Train)
		if err != nil {
			return fmt.Errorf("export: the job's training data (its features and mean): %w", err)
		}
		if train.Len() == 0 {
			return noRows(j)
		}
		if train.NumFeatures > lasso.MaxModelFeatures {
			return fmt.Errorf("export: %s: %w: its largest index is %d (a line per index, at most %d)", j.Train, lasso.ErrModelTooWide, train.NumFeatures-1, lasso.MaxModelFeatures)
		}
		p := lasso.NewProblem(train)
		w32 := make([]float32, len(p.Keys()))
		if err := src.read(ctx, lasso.WeightsTable, p.Keys(), w32); err != nil {
			return err
		}
		w := make([]float64, len(w32))
		for i, v := range w32 {
			w[i] = float64(v)
		}
		return lasso.SaveLIBLINEAR(out, p.Keys(), w, train.NumFeatures, p.Mean())
	}
	return fmt.Errorf("export: app %q has no model to export", j.App)
}

// exportClasses writes an mlr job's model as a liblinear model file, an
// nn job's as an nn model file, as the job's --model writes them: over
// the features of the job's training and test data (mlr.ModelKeys), the
// keys its evaluation of the last pass pulled.
func exportClasses(ctx context.Context, src modelSource, j api.Job, out string) error {
	train, err := data.ReadClasses(j.Train)
	if err != nil {
		return fmt.Errorf("export: the job's training data (its features): %w", err)
	}
	if train.Len() == 0 {
		return noRows(j)
	}
	var testX *data.Sparse
	if j.Test != "" {
		if test, err := data.ReadClasses(j.Test); err == nil {
			testX = test.X
		}
	}
	keys := mlr.ModelKeys(train.X, testX)
	if j.App == "mlr" {
		if largest := keys[len(keys)-1]; largest > lasso.MaxModelFeatures {
			return fmt.Errorf("export: %s: %w: its largest index is %d (a line per index, at most %d)", j.Train, mlr.ErrModelTooWide, largest-1, lasso.MaxModelFeatures)
		}
		k, err := src.width(ctx, mlr.TableName)
		if err != nil {
			return err
		}
		w := make([]float32, len(keys)*k)
		if err := src.read(ctx, mlr.TableName, keys, w); err != nil {
			return err
		}
		return mlr.SaveLIBLINEAR(out, keys, w, k)
	}
	h, err := src.width(ctx, mlr.HiddenTable)
	if err != nil {
		return err
	}
	k, err := src.width(ctx, mlr.OutputTable)
	if err != nil {
		return err
	}
	w1, w2 := make([]float32, len(keys)*h), make([]float32, (h+1)*k)
	if err := src.read(ctx, mlr.HiddenTable, keys, w1); err != nil {
		return err
	}
	if err := src.read(ctx, mlr.OutputTable, keyRange(uint64(h+1)), w2); err != nil {
		return err
	}
	n, err := mlr.NewNetwork(keys, w1, w2, h, k)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	return n.Save(out)
}

func keyRange(n uint64) []uint64 {
	keys := make([]uint64, n)
	for i := range keys {
		keys[i] = uint64(i)
	}
	return keys
}

// liveSource reads tables from a cluster's servers.
type liveSource struct{ c *ps.Client }

func (s liveSource) width(ctx context.Context, name string) (int, error) {
	t, err := s.c.Table(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("export: %w", err)
	}
	return t.Width(), nil
}

func (s liveSource) read(ctx context.Context, name string, keys []uint64, dst []float32) error {
	t, err := s.c.Table(ctx, name)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	var f *ps.Future
	if n := uint64(len(keys)); n > 0 && keys[0] == 0 && keys[n-1] == n-1 {
		f = t.PullRange(keyspace.Range{Lo: 0, Hi: n}, dst) // a dense model: one range message a server
	} else {
		f = t.Pull(keys, dst)
	}
	if err := f.Wait(ctx); err != nil {
		return fmt.Errorf("export: pull %s: %w", name, err)
	}
	return nil
}

// checkpointSource reads tables from a committed cluster checkpoint.
type checkpointSource struct{ ck coord.Committed }

func (s checkpointSource) table(name string) (id uint32, spec table.Spec, err error) {
	for _, t := range s.ck.Tables {
		if t.Spec.Name == name {
			return t.ID, t.Spec, nil
		}
	}
	return 0, table.Spec{}, fmt.Errorf("export: checkpoint %d under %s has no table %q", s.ck.Seq, s.ck.Dir, name)
}

func (s checkpointSource) width(_ context.Context, name string) (int, error) {
	_, spec, err := s.table(name)
	return spec.Width, err
}

// read reads keys as a live server's pull would: a key no push created
// is not in the checkpoint, and reads as the table's initial value
// (nn's random one; the written model must be the one the job scored).
func (s checkpointSource) read(ctx context.Context, name string, keys []uint64, dst []float32) error {
	id, spec, err := s.table(name)
	if err != nil {
		return err
	}
	w := spec.Width
	for i, k := range keys {
		store.InitValue(spec.Init, dst[i*w:(i+1)*w], k)
	}
	err = server.ReadCheckpoint(ctx, s.ck.Dir, s.ck.Seq, s.ck.Servers, id, func(k uint64, v []float32) error {
		if i, ok := slices.BinarySearch(keys, k); ok {
			copy(dst[i*w:(i+1)*w], v)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	return nil
}

// noRows is export's error for training data with no rows: the model
// read with it was the job's read at no scale, or over no users, items,
// words or features, and written without a word.
func noRows(j api.Job) error {
	return fmt.Errorf("export: the job's training data %s has no rows: %w (export reads the model with what the data holds: lr's scaling, mf's users and items, lda's words, the others' features)", j.Train, errNoRows)
}

// errNoRows is noRows's sentinel.
var errNoRows = errors.New("nothing to read the model with")

// useTrain points j at train, the training data export was given, if
// set; else it refuses a job whose training data is not where it says.
// Every app's export reads it (lr's scaling, mf's users and items, lda's
// words, the others' features): moved data said only "open PATH: no such
// file or directory", and so did a relative path, which the job's workers
// read from their own directories, from another directory.
func useTrain(j *api.Job, train string) error {
	if train != "" {
		j.Train = train
		return nil
	}
	if j.Train == "" {
		return nil // the app's export says what it lacks
	}
	_, err := os.Stat(j.Train)
	switch {
	case !errors.Is(err, fs.ErrNotExist):
		return nil
	case !filepath.IsAbs(j.Train):
		return fmt.Errorf("the job's training data %s is not here: its workers read that path from their directories, and export from this one (run export there, or give --train): %w", j.Train, err)
	}
	return fmt.Errorf("the job's training data %s is not there (moved? give --train, where it is now): %w", j.Train, err)
}

// committedWhere says where in training checkpoint ck was taken. A
// checkpoint inside pass 49 was said to be "after pass 48": the model
// holds the rows of pass 49 trained before it too.
func committedWhere(ck coord.Committed) string {
	return checkpointWhere(ck.Pass, ck.InPass != nil)
}

// exportCheckpoint writes the model of the newest committed checkpoint
// under dir that is intact to out, saying why it passed over newer ones, as the live export does: no cluster is needed, and
// the model is the one of the pass the checkpoint was taken after.
// train, if set, replaces the job's training data path (moved data, or a
// checkpoint whose commit record names no job: an lr job is assumed).
func exportCheckpoint(ctx context.Context, w io.Writer, dir, train, out string) error {
	ck, err := coord.LatestCommitted(ctx, dir)
	for _, e := range ck.Skipped {
		fmt.Fprintf(w, "terrace: passed over a newer checkpoint: %v\n", e)
	}
	if err != nil {
		return fmt.Errorf("export --checkpoint-dir %s: %w", dir, err)
	}
	j := api.Job{App: "lr", Scale: "max"}
	if ck.Job != nil {
		j = *ck.Job
	} else if train == "" {
		return fmt.Errorf("export --checkpoint-dir %s: checkpoint %d names no job (written before commit records did): give --train, the job's training data", dir, ck.Seq)
	}
	if err := useTrain(&j, train); err != nil {
		return fmt.Errorf("export --checkpoint-dir %s: %w", dir, err)
	}
	if err := exportModel(ctx, checkpointSource{ck}, j, out); err != nil {
		return err
	}
	fmt.Fprintf(w, "terrace: exported the %s model of checkpoint %d (%s) to %s\n", j.App, ck.Seq, committedWhere(ck), out)
	return nil
}
