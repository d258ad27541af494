package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"github.com/terrace-ml/terrace/apps/lr"
	"github.com/terrace-ml/terrace/apps/mf"
	"github.com/terrace-ml/terrace/node"
	"github.com/terrace-ml/terrace/ps"
	"github.com/terrace-ml/terrace/table"
)

// appFlags are the flags that choose and configure an application; train
// and worker share them.
type appFlags struct {
	app, train, test, consistency, encoding string
	epochs, batch, rank                     int
	lr, l1, l2, significance                float64
	seed                                    uint64
	fs                                      *pflag.FlagSet
}

const (
	defaultTrain = "datasets/a9a/a9a.gz"
	defaultTest  = "datasets/a9a/a9a.t.gz"
)

func (a *appFlags) register(fs *pflag.FlagSet) {
	a.fs = fs
	fs.StringVar(&a.app, "app", "lr", "application: lr (sparse logistic regression) or mf (matrix factorisation)")
	fs.StringVar(&a.train, "train", "", "training data (lr: LIBSVM, plain or gzip; mf: user item rating lines); lr defaults to "+defaultTrain)
	fs.StringVar(&a.test, "test", "", "test data, same format; lr defaults to "+defaultTest)
	fs.StringVar(&a.consistency, "consistency", "ssp:2", "consistency model: bsp, ssp:S or asp")
	fs.StringVar(&a.encoding, "encoding", "raw", "push encoding: raw, sparse, fp16 or int8 (the last two are lossy)")
	fs.IntVar(&a.epochs, "epochs", 0, "passes over the training data (app default if 0: lr 10, mf 30)")
	fs.IntVar(&a.batch, "batch", 0, "examples per worker minibatch (app default if 0: lr 100, mf 64)")
	fs.IntVar(&a.rank, "factors", 64, "mf: number of latent factors")
	fs.Float64Var(&a.lr, "lr", 0.1, "learning rate (lr: FTRL alpha; mf: SGD step, default 0.01 there)")
	fs.Float64Var(&a.l1, "l1", 0.001, "lr: FTRL L1 strength")
	fs.Float64Var(&a.l2, "l2", 0.01, "L2 strength (mf default 0.08)")
	fs.Float64Var(&a.significance, "significance", 0, "push only entries whose accumulated change exceeds this (0: push everything)")
	fs.Uint64Var(&a.seed, "seed", 1, "random seed (shuffling, initialisation)")
}

// job builds the worker job; progress, when set, gets rank 0's epoch lines.
func (a *appFlags) job(progress io.Writer) (node.Job, error) {
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
		cfg.Consistency, cfg.Seed, cfg.Rank = cons, a.seed, a.rank
		setInt(&cfg.Epochs, a.epochs)
		setInt(&cfg.Batch, a.batch)
		if a.fs.Changed("lr") {
			cfg.LR = float32(a.lr)
		}
		if a.fs.Changed("l2") {
			cfg.L2 = float32(a.l2)
		}
		if progress != nil {
			cfg.Progress = func(s mf.EpochStats) {
				fmt.Fprintf(progress, "epoch %2d/%d  %6.2fs  train RMSE %.4f  test RMSE %.4f\n", s.Epoch, cfg.Epochs, s.Seconds, s.TrainRMSE, s.TestRMSE)
			}
		}
		return func(ctx context.Context, c *ps.Client) (any, error) { return mf.Run(ctx, c, cfg) }, nil
	}
	return nil, fmt.Errorf("unknown --app %q: want lr or mf", a.app)
}

func readable(paths ...string) error {
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("data file: %w (run from the repository root, or pass --train and --test)", err)
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

// lrConfig builds the lr configuration from the flags; job and the
// drill's workers (which turn the audit on) share it.
func (a *appFlags) lrConfig(progress io.Writer) (lr.Config, error) {
	cons, err := table.ParseConsistency(a.consistency)
	if err != nil {
		return lr.Config{}, err
	}
	cfg := lr.DefaultConfig()
	cfg.Train, cfg.Test = or(a.train, defaultTrain), or(a.test, defaultTest)
	if err := readable(cfg.Train, cfg.Test); err != nil {
		return lr.Config{}, err
	}
	cfg.Consistency, cfg.Encoding, cfg.Seed = cons, table.Encoding(a.encoding), a.seed
	cfg.Significance = float32(a.significance)
	setInt(&cfg.Epochs, a.epochs)
	setInt(&cfg.Batch, a.batch)
	cfg.Rule.LR, cfg.Rule.L1, cfg.Rule.L2 = float32(a.lr), float32(a.l1), float32(a.l2)
	if progress != nil {
		cfg.Progress = func(s lr.EpochStats) {
			fmt.Fprintf(progress, "epoch %2d/%d  %6.2fs  train logloss %.4f  test accuracy %.4f  logloss %.4f  AUC %.4f\n",
				s.Epoch, cfg.Epochs, s.Seconds, s.TrainLogLoss, s.TestAccuracy, s.TestLogLoss, s.TestAUC)
		}
	}
	return cfg, nil
}
