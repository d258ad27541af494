package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/table"
)

// check refuses, early and by flag name, what would train nothing or
// train silently wrong: negative counts, negative or non-finite rates
// (a negative --lr was taken as the default), an unknown consistency
// model or encoding (which a worker found only once its table was made),
// missing or empty data files.
func (a *appFlags) check() error {
	if err := a.checkFlags(); err != nil {
		return err
	}
	return a.checkFiles()
}

// appOnlyFlags are the app flags that only some apps read.
var appOnlyFlags = []struct {
	name string
	apps []string
}{
	{"factors", []string{"mf"}}, {"hidden", []string{"nn"}},
	{"topics", []string{"lda"}}, {"alpha", []string{"lda"}}, {"beta", []string{"lda"}}, {"vocab", []string{"lda"}},
	{"l1", []string{"lr", "lasso"}}, {"l2", []string{"lr", "mf", "mlr", "nn"}}, {"lr", []string{"lr", "mf", "mlr", "nn"}},
	{"encoding", []string{"lr", "mlr", "nn"}}, {"significance", []string{"lr"}},
}

// checkFlags checks the flags' values, not the files they name.
func (a *appFlags) checkFlags() error {
	switch a.app {
	case "lr", "mf", "mlr", "nn", "lasso", "lda":
	default:
		return unknownApp(a.app)
	}
	if a.app == "nn" && a.hidden <= 0 {
		return fmt.Errorf("--hidden %d: want one unit or more", a.hidden)
	}
	// Each is a table's width: out of range, every worker failed once the
	// cluster had formed, naming the table, not the flag.
	if a.app == "nn" && a.hidden > table.MaxWidth {
		return fmt.Errorf("--hidden %d: want at most %d units", a.hidden, table.MaxWidth)
	}
	if a.app == "mf" && (a.rank < 1 || a.rank > table.MaxWidth) {
		return fmt.Errorf("--factors %d: want 1 to %d", a.rank, table.MaxWidth)
	}
	// A flag given with an app that does not read it was ignored without
	// a word (lda's --encoding and --significance: ldaConfig says why).
	for _, f := range appOnlyFlags {
		if a.fs != nil && a.fs.Changed(f.name) && !slices.Contains(f.apps, a.app) && (a.app != "lda" || f.name != "encoding" && f.name != "significance") {
			return fmt.Errorf("--%s is for --app %s, not %s", f.name, strings.Join(f.apps, ", "), a.app)
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"passes", a.passes}, {"batch", a.batch}} {
		if f.v < 0 {
			return fmt.Errorf("--%s %d: must be positive (0 takes the app's default)", f.name, f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"lr", a.lr}, {"l1", a.l1}, {"l2", a.l2}, {"significance", a.significance}} {
		if !(f.v >= 0) || math.IsInf(f.v, 0) {
			return fmt.Errorf("--%s %v: want a finite number >= 0", f.name, f.v)
		}
	}
	if _, err := table.ParseConsistency(a.consistency); err != nil {
		return fmt.Errorf("--consistency %q: want bsp, asp or ssp:S (S a staleness of 0 or more clocks)", a.consistency)
	}
	switch table.Encoding(a.encoding) {
	case "", table.Raw, table.Sparse, table.FP16, table.Int8:
	default:
		return fmt.Errorf("--encoding %q: want raw, sparse, fp16 or int8", a.encoding)
	}
	if a.app != "lr" && a.scale != "" {
		return fmt.Errorf("--scale is for --app lr")
	}
	switch a.scale {
	case "", "max", "none":
	default:
		return fmt.Errorf("--scale %q: want max or none", a.scale)
	}
	return nil
}

// checkFiles checks the data files the flags name, or their defaults.
func (a *appFlags) checkFiles() error {
	if a.app == "mf" && (a.train == "" || a.test == "") {
		return fmt.Errorf("--app mf needs --train and --test (MovieLens ratings, e.g. ../shared/data/ratings/ml-100k/u1.base and u1.test)")
	}
	if (a.app == "mlr" || a.app == "nn") && a.train == "" {
		return fmt.Errorf("--app %s needs --train (MNIST's images file, e.g. ../shared/data/images/mnist/train-images-idx3-ubyte.gz, its labels file found beside it, or LIBSVM lines of class numbers) and takes --test the same", a.app)
	}
	if (a.app == "mlr" || a.app == "nn") && a.model != "" && a.test == "" {
		return fmt.Errorf("--app %s writes its --model with the last pass's evaluation: give --test too", a.app)
	}
	if a.app == "lasso" && a.fs.Changed("l1") && !(a.l1 > 0) {
		return fmt.Errorf("--l1 %v: lasso's lambda must be positive", a.l1)
	}
	if err := a.checkModelPath(); err != nil {
		return err
	}
	files := []struct{ flag, path, def string }{{"train", a.train, defaultTrain}, {"test", a.test, defaultTest}, {"vocab", a.vocab, ""}}
	if a.train != "" {
		files[1].def = "" // lrTestPath
	}
	if a.app == "lda" {
		files[0].def, files[1].def, files[2].def = defaultLDATrain, "", ""
		if a.train == "" && a.vocab == "" {
			files[2].def = defaultLDAVocab
		}
	}
	for _, f := range files {
		if err := dataFile(f.flag, f.path, f.def); err != nil {
			return err
		}
	}
	return nil
}

// checkModelPath refuses a --model file that could not be written once
// the job is trained: it was found after the last pass, the training lost
// ("evaluating pass 10: model: open ...: no such file or directory").
// mf and lda write a directory, made with its parents.
func (a *appFlags) checkModelPath() error {
	if a.model == "" || a.app == "mf" || a.app == "lda" {
		return nil
	}
	if st, err := os.Stat(a.model); err == nil && st.IsDir() {
		return fmt.Errorf("--model %s is a directory: --app %s writes its model to a file", a.model, a.app)
	}
	return checkOutDir("model", a.model)
}

// checkOutDir refuses a file that --flag names in a directory that is not
// there.
func checkOutDir(flag, path string) error {
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("--%s %s: its directory: %w", flag, path, err)
	case !st.IsDir():
		return fmt.Errorf("--%s %s: %s is not a directory", flag, path, dir)
	}
	return nil
}

// outputFlags are the flags that name a file a command writes at its end.
// Written there, a missing directory failed a train, a bench or a job's
// coordinator once all the work was done ("report: open
// /nonexistent/r.json.tmp"), and the work's report was lost.
var outputFlags = []struct{ command, flag string }{
	{"", "report"}, {"coordinator", "events"}, {"stragglers", "plot"}, {"replay", "plot"},
}

// checkOutputs checks the files cmd's output flags name before it runs.
func checkOutputs(cmd *cobra.Command) error {
	for _, o := range outputFlags {
		f := cmd.Flags().Lookup(o.flag)
		if f == nil || f.Value.Type() != "string" || f.Value.String() == "" || (o.command != "" && o.command != cmd.Name()) {
			continue
		}
		if st, err := os.Stat(f.Value.String()); err == nil && st.IsDir() {
			return fmt.Errorf("--%s %s is a directory: it names the file to write", o.flag, f.Value.String())
		}
		if err := checkOutDir(o.flag, f.Value.String()); err != nil {
			return err
		}
	}
	return nil
}

// checkCoordinatorFlag refuses a --coordinator that names no address a
// request can be made to: a port that is not a number panicked every
// node and client command ("invalid memory address or nil pointer
// dereference").
func checkCoordinatorFlag(cmd *cobra.Command) error {
	f := cmd.Flags().Lookup("coordinator")
	if f == nil || f.Value.Type() != "string" {
		return nil
	}
	if err := api.CheckAddrs(f.Value.String()); err != nil {
		return fmt.Errorf("--coordinator: %w", err)
	}
	return nil
}

// dataFile checks the file of --flag (path, or def when the flag was not
// given): it must exist and hold something.
func dataFile(flag, path, def string) error {
	p, given := path, path != ""
	if !given {
		if p = def; p == "" {
			return nil
		}
	}
	st, err := os.Stat(p)
	switch {
	case err != nil && given:
		return fmt.Errorf("--%s %s: %w", flag, p, err)
	case err != nil:
		return fmt.Errorf("--%s not given, and its default %s: %w (run from the repository root, or pass --%s)", flag, p, err, flag)
	case st.IsDir():
		return fmt.Errorf("--%s %s is a directory, not a data file", flag, p)
	case st.Size() == 0:
		return fmt.Errorf("--%s %s is empty: nothing to %s", flag, p, map[string]string{"train": "train on", "test": "evaluate on", "vocab": "name words with"}[flag])
	}
	return nil
}

func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
