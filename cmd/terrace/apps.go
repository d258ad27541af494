package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/terrace-ml/terrace/apps/lasso"
	"github.com/terrace-ml/terrace/apps/lda"
	"github.com/terrace-ml/terrace/apps/lr"
	"github.com/terrace-ml/terrace/apps/mf"
	"github.com/terrace-ml/terrace/apps/mlr"
	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/internal/process/node"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// appFlags are the flags that choose and configure an application; train
// and worker share them.
type appFlags struct {
	app, train, test, vocab, consistency, encoding string
	scale, model                                   string
	passes, batch, rank, topics, hidden            int
	lr, l1, l2, significance, alpha, beta          float64
	seed                                           uint64
	fs                                             *pflag.FlagSet
}

const (
	defaultTrain    = "datasets/a9a/a9a.gz"
	defaultTest     = "datasets/a9a/a9a.t.gz"
	defaultLDATrain = "datasets/kos/doc_word_count.tsv.gz"
	defaultLDAVocab = "datasets/kos/dictionary.txt"
)

func (a *appFlags) register(fs *pflag.FlagSet) {
	a.fs = fs
	fs.StringVar(&a.app, "app", "lr", "application: lr (sparse logistic regression), mf (matrix factorisation), mlr (multinomial logistic regression), nn (a small neural network: mlr with a hidden layer), lasso (L1 least squares by scheduled coordinate descent) or lda (topic model)")
	fs.IntVar(&a.hidden, "hidden", 100, "nn: hidden ReLU units")
	fs.StringVar(&a.train, "train", "", "training data (lr: LIBSVM, plain or gzip; mf: user item rating lines, ids numbers or strings (MovieLens, Amazon, Yelp, Book-Crossing's quoted ';' lines), or the Netflix Prize's item: blocks; mlr, nn: MNIST's IDX images file, its labels file beside it, or LIBSVM lines of class numbers; lasso: LIBSVM lines of real targets; lda: doc word count lines); lr and lasso default to "+defaultTrain+", lda to "+defaultLDATrain)
	fs.StringVar(&a.test, "test", "", "test data, same format; lr defaults to "+defaultTest+" when --train is not given either (none with a --train of your own), lda holds out every 10th document of --train instead")
	fs.StringVar(&a.vocab, "vocab", "", "lda: vocabulary, one word a line, to print topics' top words with; defaults to "+defaultLDAVocab+" with the default --train")
	fs.IntVar(&a.topics, "topics", 20, "lda: number of topics K")
	fs.Float64Var(&a.alpha, "alpha", 0.1, "lda: Dirichlet prior of the documents' topic mixtures")
	fs.Float64Var(&a.beta, "beta", 0.01, "lda: Dirichlet prior of the topics' word distributions")
	fs.StringVar(&a.consistency, "consistency", "ssp:2", "consistency model: bsp, ssp:S or asp")
	fs.StringVar(&a.encoding, "encoding", "raw", "lr, mlr, nn: push encoding: raw, sparse, fp16 or int8 (the last two are lossy)")
	fs.IntVar(&a.passes, "passes", 0, "passes over the training data (app default if 0: lr 10, mf 30, mlr and nn 10, lasso 20, lda 30, the first of which assigns random topics); --epochs is another name for it")
	fs.SetNormalizeFunc(passesAlias)
	fs.IntVar(&a.batch, "batch", 0, "examples per worker minibatch (app default if 0: lr 100, or fewer for small data (rows/400, at least 10), mf 64, mlr and nn 100, lasso 8 coordinates, lda 64 documents)")
	fs.IntVar(&a.rank, "factors", 64, "mf: number of latent factors")
	fs.Float64Var(&a.lr, "lr", 0, "lr, mf, mlr, nn: learning rate (app default if 0: lr's FTRL alpha 1, on features scaled by --scale; mf's SGD step 0.01; mlr's AdaGrad 0.1; nn's SGD 0.5)")
	fs.Float64Var(&a.l1, "l1", 0.001, "lr: FTRL L1 strength; lasso: the L1 strength lambda (default 0.05 of the data's lambda_max, the least that zeroes every weight)")
	fs.Float64Var(&a.l2, "l2", 0.01, "lr, mf, mlr, nn: L2 strength (mf default 0.08, mlr and nn 0)")
	fs.Float64Var(&a.significance, "significance", 0, "lr: push only entries whose accumulated change exceeds this (0: push everything)")
	fs.Uint64Var(&a.seed, "seed", 1, "random seed (shuffling, initialisation)")
	fs.StringVar(&a.scale, "scale", "", "lr: divide each feature by its largest absolute value in --train (max, the default) or train on raw values (none)")
	fs.StringVar(&a.model, "model", "", "write the trained model here after the last pass (terrace export's formats: lr, mlr and lasso a liblinear model file, nn an nn model file (docs/format/nn.md), mf and lda a directory of TSV files)")
}

// passesAlias makes --epochs another name for --passes: a training pass
// is a pass, but users know the flag by the old name.
func passesAlias(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	if name == "epochs" {
		name = "passes"
	}
	return pflag.NormalizedName(name)
}

// job builds the worker job; progress, when set, gets rank 0's pass lines.
func (a *appFlags) job(progress io.Writer) (node.Job, error) {
	if err := a.check(); err != nil {
		return nil, err
	}
	cons, err := table.ParseConsistency(a.consistency)
	if err != nil {
		return nil, err
	}
	switch a.app {
	case "lr":
		cfg, err := a.lrConfig(progress)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, c *ps.Client) (any, error) { return lr.Run(ctx, c, cfg) }, nil
	case "mf":
		cfg := mf.DefaultConfig()
		if a.train == "" || a.test == "" {
			return nil, fmt.Errorf("--app mf needs --train and --test (MovieLens ratings, e.g. ../shared/data/ratings/ml-100k/u1.base and u1.test)")
		}
		cfg.Train, cfg.Test = a.train, a.test
		if err := readable(cfg.Train, cfg.Test); err != nil {
			return nil, err
		}
		cfg.Consistency, cfg.Seed, cfg.Rank, cfg.Model = cons, a.seed, a.rank, a.model
		setInt(&cfg.Passes, a.passes)
		setInt(&cfg.Batch, a.batch)
		if a.fs.Changed("lr") {
			cfg.LR = float32(a.lr)
		}
		if a.fs.Changed("l2") {
			cfg.L2 = float32(a.l2)
		}
		if progress != nil {
			cfg.Progress = func(s mf.PassStats) {
				fmt.Fprintf(progress, "pass %2d/%d  %6.2fs  train RMSE %s  test RMSE %.4f\n", s.Pass, cfg.Passes, s.Seconds, orDash(s.TrainRMSE), s.TestRMSE)
			}
		}
		return func(ctx context.Context, c *ps.Client) (any, error) { return mf.Run(ctx, c, cfg) }, nil
	case "mlr", "nn":
		cfg, err := a.mlrConfig(cons, progress)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, c *ps.Client) (any, error) { return mlr.Run(ctx, c, cfg) }, nil
	case "lasso":
		cfg, err := a.lassoConfig(cons, progress)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, c *ps.Client) (any, error) { return lasso.Run(ctx, c, cfg) }, nil
	case "lda":
		cfg, err := a.ldaConfig(progress)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, c *ps.Client) (any, error) {
			rep, err := lda.Run(ctx, c, cfg)
			if err == nil && progress != nil && len(rep.Topics) > 0 {
				printTopics(progress, rep.Topics)
			}
			return rep, err
		}, nil
	}
	return nil, unknownApp(a.app)
}

// unknownApp is the error for an --app that is none of the apps.
func unknownApp(app string) error {
	return fmt.Errorf("unknown --app %q: want lr, mf, mlr, nn, lasso or lda", app)
}

// lassoConfig builds the lasso configuration from the flags.
func (a *appFlags) lassoConfig(cons table.Consistency, progress io.Writer) (lasso.Config, error) {
	cfg := lasso.DefaultConfig()
	cfg.Train, cfg.Test = or(a.train, defaultTrain), lrTestPath(a.train, a.test)
	if err := readable(cfg.Train, cfg.Test); err != nil {
		return lasso.Config{}, err
	}
	cfg.Consistency, cfg.Seed, cfg.Model = cons, a.seed, a.model
	setInt(&cfg.Passes, a.passes)
	setInt(&cfg.Batch, a.batch)
	if a.fs.Changed("l1") {
		cfg.Lambda = a.l1
	}
	if progress != nil {
		cfg.Progress = func(s lasso.PassStats) {
			fmt.Fprintf(progress, "pass %2d/%d  %6.2fs  objective %.6f  nonzero %d  test RMSE %.4f\n", s.Pass, cfg.Passes, s.Seconds, s.Objective, s.NonZero, s.TestRMSE)
		}
	}
	return cfg, nil
}

// mlrConfig builds the mlr (or nn) configuration from the flags.
func (a *appFlags) mlrConfig(cons table.Consistency, progress io.Writer) (mlr.Config, error) {
	cfg := mlr.DefaultConfig()
	if a.app == "nn" {
		cfg = mlr.DefaultNetworkConfig()
		cfg.Hidden = a.hidden
	}
	cfg.Train, cfg.Test = a.train, a.test
	if err := readable(cfg.Train, cfg.Test); err != nil {
		return mlr.Config{}, err
	}
	cfg.Consistency, cfg.Encoding, cfg.Seed, cfg.Model = cons, table.Encoding(a.encoding), a.seed, a.model
	setInt(&cfg.Passes, a.passes)
	setInt(&cfg.Batch, a.batch)
	if a.fs.Changed("lr") {
		cfg.LR = float32(a.lr)
	}
	if a.fs.Changed("l2") {
		cfg.L2 = float32(a.l2)
	}
	if progress != nil {
		cfg.Progress = func(s mlr.PassStats) {
			fmt.Fprintf(progress, "pass %2d/%d  %6.2fs  train logloss %s  test accuracy %.4f  logloss %.4f\n",
				s.Pass, cfg.Passes, s.Seconds, orDash(s.TrainLogLoss), s.TestAccuracy, s.TestLogLoss)
		}
	}
	return cfg, nil
}

func readable(paths ...string) error {
	for _, p := range paths {
		if p == "" {
			continue // not given, and no default (lrTestPath)
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("data file: %w", err)
		}
	}
	return nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func setInt(dst *int, v int) {
	if v > 0 {
		*dst = v
	}
}

// lrTestPath is lr's test data: --test, or the shipped a9a test split
// when --train is not given either. A --train of one's own without --test
// has no test set (lr then reports its training figures only): it was
// scored on a9a's test split, figures of another data set.
func lrTestPath(train, test string) string {
	if test != "" || train != "" {
		return test
	}
	return defaultTest
}

// lrConfig builds the lr configuration from the flags; job and the
// drill's workers (which turn the audit on) share it.
func (a *appFlags) lrConfig(progress io.Writer) (lr.Config, error) {
	cons, err := table.ParseConsistency(a.consistency)
	if err != nil {
		return lr.Config{}, err
	}
	cfg := lr.DefaultConfig()
	cfg.Train, cfg.Test = or(a.train, defaultTrain), lrTestPath(a.train, a.test)
	if err := readable(cfg.Train, cfg.Test); err != nil {
		return lr.Config{}, err
	}
	cfg.Consistency, cfg.Encoding, cfg.Seed = cons, table.Encoding(a.encoding), a.seed
	cfg.Significance = float32(a.significance)
	setInt(&cfg.Passes, a.passes)
	cfg.Batch = a.batch // 0: lr.AutoBatch of the data
	if a.lr > 0 {
		cfg.Rule.LR = float32(a.lr)
	}
	cfg.Rule.L1, cfg.Rule.L2 = float32(a.l1), float32(a.l2)
	cfg.Scale, cfg.Model = a.scale != "none", a.model
	if cfg.NegLabel, err = negLabel(cfg.Train); err != nil {
		return lr.Config{}, err
	}
	if progress != nil {
		cfg.Progress = func(s lr.PassStats) {
			fmt.Fprintf(progress, "pass %2d/%d  %6.2fs  train logloss %s  test accuracy %.4f  logloss %.4f  AUC %.4f\n",
				s.Pass, cfg.Passes, s.Seconds, orDash(s.TrainLogLoss), s.TestAccuracy, s.TestLogLoss, s.TestAUC)
		}
	}
	return cfg, nil
}

// ldaConfig builds the lda configuration from the flags.
func (a *appFlags) ldaConfig(progress io.Writer) (lda.Config, error) {
	cons, err := table.ParseConsistency(a.consistency)
	if err != nil {
		return lda.Config{}, err
	}
	for _, f := range []string{"test", "encoding", "significance"} {
		if a.fs.Changed(f) {
			// Counts must arrive exactly: a lossy encoding or a filter that
			// holds deltas back would part the table from the topics.
			return lda.Config{}, fmt.Errorf("--app lda does not take --%s (it holds out every 10th document and pushes exact count deltas)", f)
		}
	}
	cfg := lda.DefaultConfig()
	cfg.Train, cfg.Vocab = or(a.train, defaultLDATrain), a.vocab
	if a.train == "" && a.vocab == "" {
		cfg.Vocab = defaultLDAVocab
	}
	if err := readable(cfg.Train); err != nil {
		return lda.Config{}, err
	}
	cfg.Consistency, cfg.Seed, cfg.Topics, cfg.Alpha, cfg.Beta, cfg.Model = cons, a.seed, a.topics, a.alpha, a.beta, a.model
	setInt(&cfg.Passes, a.passes)
	setInt(&cfg.Batch, a.batch)
	if err := cfg.Check(); err != nil {
		return lda.Config{}, err
	}
	if progress != nil {
		cfg.Progress = func(s lda.PassStats) {
			fmt.Fprintf(progress, "pass %2d/%d  %6.2fs  train log-likelihood/token %.4f  held-out perplexity %.1f\n",
				s.Pass, cfg.Passes, s.Seconds, s.LogLikelihood, s.TestPerplexity)
		}
	}
	return cfg, nil
}

// shownTopics is how many topics the end of an lda run prints.
const shownTopics = 8

// printTopics prints the largest topics' top words.
func printTopics(w io.Writer, topics []lda.Topic) {
	for i, t := range topics[:min(shownTopics, len(topics))] {
		fmt.Fprintf(w, "topic %d (%d tokens): %s\n", i+1, t.Tokens, strings.Join(t.Words, " "))
	}
}

// auditSize returns, for the drill's accounting, how many rows the app's
// partition loop numbers (0 to rows-1) and how many passes it trains.
func (a *appFlags) auditSize() (rows, passes int, err error) {
	switch a.app {
	case "lr":
		train, err := data.ReadLIBSVM(or(a.train, defaultTrain))
		if err != nil {
			return 0, 0, err
		}
		rows, passes = train.Len(), lr.DefaultConfig().Passes
	case "mf":
		train, err := data.ReadRatings(a.train)
		if err != nil {
			return 0, 0, err
		}
		rows, passes = train.Len(), mf.DefaultConfig().Passes
	case "lasso":
		train, err := data.ReadRegression(or(a.train, defaultTrain))
		if err != nil {
			return 0, 0, err
		}
		// Its partition loop numbers coordinates, not rows.
		rows, passes = int(train.NumFeatures), lasso.DefaultConfig().Passes
	case "mlr", "nn":
		train, err := data.ReadClasses(a.train)
		if err != nil {
			return 0, 0, err
		}
		rows, passes = train.Len(), mlr.DefaultConfig().Passes
	case "lda":
		cfg, err := a.ldaConfig(nil)
		if err != nil {
			return 0, 0, err
		}
		if rows, err = lda.Rows(cfg); err != nil {
			return 0, 0, err
		}
		passes = cfg.Passes
	default:
		return 0, 0, unknownApp(a.app)
	}
	setInt(&passes, a.passes)
	return rows, passes, nil
}

// totalPasses is how many passes the app trains, for progress.
func (a *appFlags) totalPasses() int {
	if a.passes > 0 {
		return a.passes
	}
	switch a.app {
	case "lr":
		return lr.DefaultConfig().Passes
	case "mf":
		return mf.DefaultConfig().Passes
	case "mlr", "nn":
		return mlr.DefaultConfig().Passes
	case "lasso":
		return lasso.DefaultConfig().Passes
	case "lda":
		return lda.DefaultConfig().Passes
	}
	return 0
}

// orDash is a pass's training figure for its progress line: "-" where
// the evaluating worker trained none of the pass.
func orDash(v *float64) string {
	if v == nil {
		return "     -"
	}
	return fmt.Sprintf("%.4f", *v)
}
