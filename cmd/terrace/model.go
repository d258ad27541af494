package main

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/terrace-ml/terrace/apps/lasso"
	"github.com/terrace-ml/terrace/apps/lr"
	"github.com/terrace-ml/terrace/apps/mf"
	"github.com/terrace-ml/terrace/apps/mlr"
	"github.com/terrace-ml/terrace/data"
	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/control/auth"
	"github.com/terrace-ml/terrace/internal/modelfile"
	"github.com/terrace-ml/terrace/metrics"
	"github.com/terrace-ml/terrace/ps"
)

// negLabel is how a LIBSVM file writes its negative class: "0" or "-1"
// (the first that its labels show; "-1" if none), so that an exported
// model predicts labels that tools compare with the file's own.
func negLabel(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("--train %s: %w", path, err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return "", fmt.Errorf("--train %s: %w", path, err)
		}
		defer gz.Close()
		r = gz
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for n := 0; sc.Scan() && n < 10000; n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil && v <= 0 {
			if v == 0 {
				return "0", nil
			}
			return "-1", nil
		}
	}
	return "-1", nil
}

// errNoServer: no server of a live cluster answered export.
var errNoServer = errors.New("no server of the cluster answers")

// errModelGone: every server of the cluster left or died, and the
// job's model with them.
var errModelGone = errors.New("every server of the cluster has left or died, and the job's model with them")

// modelGone reports, from the coordinator's status, whether no server
// holds the model any more: there were servers, and each left (the last
// one after the job leaves with the model) or died. Export waited its
// whole --timeout for one to answer, then said that none did.
func modelGone(st *api.Status) bool {
	servers := 0
	for _, n := range st.Nodes {
		if n.Role != api.RoleServer {
			continue
		}
		if n.State != "left" && n.State != "dead" {
			return false
		}
		servers++
	}
	return servers > 0
}

func exportCmd() *cobra.Command {
	var coordinator, out, ckptDir, train string
	var timeout time.Duration
	var sec securityFlags
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write the model of the cluster's job, or of a checkpoint, in formats other tools read (lr, mlr, lasso: liblinear; nn: docs/format/nn.md; mf, lda: TSV)",
		Long: `Export reads the trained model from a running cluster's servers (a coordinator
without --exit-when-done keeps them up after the job), or with --checkpoint-dir
from the newest committed checkpoint there (no cluster needed), and writes it
to --out: for lr, mlr and lasso a liblinear model file (liblinear-predict
scores data with it); for nn an nn model file (docs/format/nn.md; terrace
predict scores data with it); for mf a directory of TSV files (users.tsv
and items.tsv: id, bias, factors; global.tsv: the mean rating and the
ratings' range, which predictions are clipped to); for lda a directory
holding topic_word_counts.tsv and top_words.tsv. The job's data files must
be readable here (lr's feature scaling, mlr's and nn's features, mf's
users and items, lda's words): a relative path is the workers', read from
their directories; from another, give --train.
A job that ends its cluster writes its model itself: give the job
--model PATH.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return errors.New("--out is required: where to write the model")
			}
			if timeout <= 0 {
				// It asked, and said the coordinator was unreachable.
				return fmt.Errorf("--timeout %v: want a positive duration", timeout)
			}
			ctx := cmd.Context()
			if ckptDir != "" {
				return exportCheckpoint(ctx, cmd.OutOrStdout(), ckptDir, train, out)
			}
			cc, nw, err := sec.client(coordinator, auth.RoleRead)
			if err != nil {
				return err
			}
			// --timeout bounds the wait for the coordinator too (a --timeout
			// 3s export retried an unreachable one for 30 s).
			cc.RetryFor = min(cc.RetryFor, timeout)
			if err := reach(ctx, cc, cmd.ErrOrStderr(), cc.RetryFor); err != nil {
				return fmt.Errorf("export from %s: %w", coordinator, err)
			}
			st, err := cc.JobStatus(ctx)
			if err != nil {
				return fmt.Errorf("export from %s: %w", coordinator, err)
			}
			if st.Job == nil {
				return fmt.Errorf("export from %s: the cluster has no job", coordinator)
			}
			j := *st.Job
			if err := useTrain(&j, train); err != nil {
				return fmt.Errorf("export from %s: %w", coordinator, err)
			}
			if cs, err := cc.Status(ctx); err == nil && modelGone(cs) {
				return fmt.Errorf("export from %s: %w (--checkpoint-dir exports a checkpoint's)", coordinator, errModelGone)
			}
			// The servers hold the model: with none answering (the job's
			// servers died after it) Connect waited for a newer layout for
			// good.
			cctx, cancel := context.WithTimeout(ctx, timeout)
			c, err := ps.Connect(cctx, cc, ps.Options{Rank: -1, NodeID: "export", Network: nw})
			cancel()
			if err != nil && cctx.Err() != nil && ctx.Err() == nil {
				return fmt.Errorf("export from %s: %w within --timeout %v (they hold the model; --checkpoint-dir exports a checkpoint's)", coordinator, errNoServer, timeout)
			}
			if err != nil {
				return fmt.Errorf("export: %w", err)
			}
			defer c.Close()
			if err := exportModel(ctx, liveSource{c}, j, out); err != nil {
				return err
			}
			// Say which model: a cluster that stays up may be training
			// (this job, or already the next), and export took it as is.
			fmt.Fprintf(cmd.OutOrStdout(), "terrace: exported the %s model of job %d (%s) to %s\n", st.Job.App, st.Number, jobState(st), out)
			return nil
		},
	}
	cmd.Flags().StringVar(&coordinator, "coordinator", "127.0.0.1:7070", "coordinator address(es), comma-separated")
	cmd.Flags().StringVar(&out, "out", "", "file to write the model to")
	cmd.Flags().StringVar(&ckptDir, "checkpoint-dir", "", "read the model from the newest committed checkpoint in this directory instead of a live cluster")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "give up if the coordinator, or then every server of the cluster, does not answer within this time")
	cmd.Flags().StringVar(&train, "train", "", "the job's training data (lr: for its feature scaling), if not where the job says (moved, or a relative path of workers in another directory)")
	sec.register(cmd.Flags(), false)
	addConfigFlag(cmd)
	return cmd
}

// lrScaling is what an lr job's model is read with: its number of keys
// and the scale of each feature, computed from the job's data as its
// workers computed them.
func lrScaling(j api.Job) (uint64, lr.Scale, error) {
	train, err := data.ReadLIBSVM(j.Train)
	if err != nil {
		return 0, lr.Scale{}, fmt.Errorf("export: the job's training data (for its feature scaling): %w", err)
	}
	if train.Len() == 0 {
		return 0, lr.Scale{}, noRows(j)
	}
	nkeys := train.NumFeatures + 1
	if j.Test != "" {
		if test, err := data.ReadLIBSVM(j.Test); err == nil {
			nkeys = max(nkeys, test.NumFeatures+1)
		}
	}
	if nkeys-1 > modelfile.MaxModelFeatures {
		return 0, lr.Scale{}, fmt.Errorf("export: %s: %w: its largest index is %d (a line per index, at most %d)", j.Train, modelfile.ErrModelTooWide, nkeys-2, modelfile.MaxModelFeatures)
	}
	var scale lr.Scale
	if j.Scale != "none" {
		scale = lr.MaxAbsScale(train)
	}
	return nkeys, scale, nil
}

// saveLR writes m as a liblinear model file, with the labels as the
// job's training file writes them.
func saveLR(m *lr.Model, j api.Job, out string) error {
	neg, err := negLabel(j.Train)
	if err != nil {
		return err
	}
	return m.SaveLIBLINEAR(out, "1", neg)
}

func predictCmd() *cobra.Command {
	var model, dataPath, out string
	cmd := &cobra.Command{
		Use:   "predict",
		Short: "Score data with an exported model (lr: a liblinear model file and LIBSVM data; lasso: a liblinear regression model and LIBSVM lines of real targets; mlr, nn: a liblinear multi-class or nn model file and MNIST or LIBSVM multi-class data; mf: a TSV directory and ratings)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if model == "" || dataPath == "" {
				return errors.New("predict needs --model (a model terrace export or --model wrote) and --data")
			}
			if st, err := os.Stat(dataPath); err == nil && st.IsDir() {
				return fmt.Errorf("--data %s is a directory: give a data file", dataPath) // read as one, it was "DIR:1: read: ... is a directory"
			}
			if st, err := os.Stat(model); err == nil && st.IsDir() {
				if _, err := os.Stat(filepath.Join(model, "topic_word_counts.tsv")); err == nil {
					return fmt.Errorf("--model %s is an lda model: predict scores lr, lasso, mlr, nn and mf models (an lda model's topics are its TSV files)", model)
				}
				return predictMF(cmd.OutOrStdout(), model, dataPath, out)
			}
			f, err := os.Open(model)
			if err != nil {
				return fmt.Errorf("--model: %w", err)
			}
			defer f.Close()
			br := bufio.NewReader(f)
			if head, _ := br.Peek(len(mlr.NetworkMagic)); string(head) == mlr.NetworkMagic {
				n, err := mlr.ReadNetwork(br, model)
				if err != nil {
					return fmt.Errorf("--model: %w", err)
				}
				return predictClasses(cmd.OutOrStdout(), n, n.Classes, model, dataPath, out)
			}
			head, _ := br.Peek(4096) // a liblinear file's header
			if lasso.IsRegression(head) {
				m, err := lasso.ReadLIBLINEAR(br, model)
				if err != nil {
					return fmt.Errorf("--model: %w", err)
				}
				return predictRegression(cmd.OutOrStdout(), m, dataPath, out)
			}
			if multiClass(head) {
				m, err := mlr.ReadLIBLINEAR(br, model)
				if err != nil {
					return fmt.Errorf("--model: %w", err)
				}
				return predictClasses(cmd.OutOrStdout(), m, m.Classes, model, dataPath, out)
			}
			m, err := lr.ReadLIBLINEAR(br, model)
			if err != nil {
				return fmt.Errorf("--model: %w", err)
			}
			d, err := data.ReadLIBSVM(dataPath)
			if err != nil {
				return fmt.Errorf("--data: %w", err)
			}
			if d.Len() == 0 {
				return fmt.Errorf("--data %s has no examples", dataPath)
			}
			acc, ll, auc := m.Evaluate(d)
			fmt.Fprintf(cmd.OutOrStdout(), "terrace: %s: %d examples, accuracy %.4f (%d/%d)  logloss %.4f  AUC %.4f\n",
				filepath.Base(dataPath), d.Len(), acc, int(acc*float64(d.Len())+0.5), d.Len(), ll, auc)
			if out == "" {
				return nil
			}
			return writeLines(out, d.Len(), func(i int) float64 { return m.Score(d, i) })
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&model, "model", "", "model: a file (lr, lasso, mlr: liblinear format, liblinear-train's too; nn: docs/format/nn.md) or a directory (mf: the TSV files --model wrote)")
	fs.StringVar(&dataPath, "data", "", "data to score (lr: LIBSVM, plain or gzip; lasso: LIBSVM lines of real targets; mlr, nn: MNIST's IDX images file, its labels beside it, or LIBSVM lines of class numbers; mf: user item rating lines, string ids numbered by the model's)")
	fs.StringVar(&out, "out", "", "write each example's prediction, one a line, here (lr: the probability of label 1; lasso: the predicted target; mlr, nn: the most probable class, then each class's probability; mf: the rating)")
	addConfigFlag(cmd)
	return cmd
}

// predictRegression scores dataPath (LIBSVM lines of real targets) with
// a regression model (lasso's, or liblinear-train's SVR), as lasso's
// evaluation does, and writes each prediction to out if set.
func predictRegression(w io.Writer, m *lasso.Model, dataPath, out string) error {
	d, err := data.ReadRegression(dataPath)
	if err != nil {
		return fmt.Errorf("--data: %w", err)
	}
	if d.Len() == 0 {
		return fmt.Errorf("--data %s has no examples", dataPath)
	}
	rmse := m.RMSE(d)
	fmt.Fprintf(w, "terrace: %s: %d examples, RMSE %.4f (mean squared error %.6f)\n", filepath.Base(dataPath), d.Len(), rmse, rmse*rmse)
	if out == "" {
		return nil
	}
	return writeLines(out, d.Len(), func(i int) float64 { return m.Predict(d, i) })
}

// writeLines writes n predictions, value(i) one a line, to path.
func writeLines(path string, n int, value func(i int) float64) error {
	return writeOut(path, func(w *bufio.Writer) {
		for i := range n {
			fmt.Fprintf(w, "%.6f\n", value(i))
		}
	})
}

// writeOut writes predict's --out file with write.
func writeOut(path string, write func(w *bufio.Writer)) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	w := bufio.NewWriter(f)
	write(w)
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("--out %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--out %s: %w", path, err)
	}
	return nil
}

// multiClass says whether the liblinear file that head opens has more
// than two classes (mlr's), from its header.
func multiClass(head []byte) bool {
	v, ok := modelfile.HeaderValue(head, "nr_class")
	k, err := strconv.Atoi(v)
	return ok && err == nil && k > 2
}

// classModel is a model of classes read back from its file: nn's, or
// mlr's of three or more classes.
type classModel interface {
	Evaluate(d *data.Classes) (acc, logloss float64)
	Predictions(d *data.Classes, each func(class int, p []float64))
}

// predictClasses scores dataPath (MNIST's IDX files or LIBSVM lines of
// class numbers) with m, of k classes read from model, as the training's
// evaluation does, and writes each example's class and probabilities to
// out if set.
func predictClasses(w io.Writer, m classModel, k int, model, dataPath, out string) error {
	d, err := data.ReadClasses(dataPath)
	if err != nil {
		return fmt.Errorf("--data: %w", err)
	}
	if d.Len() == 0 {
		return fmt.Errorf("--data %s has no examples", dataPath)
	}
	if d.NumClasses > k {
		return fmt.Errorf("--data %s has class %d; the model --model %s has classes 0 to %d", dataPath, d.NumClasses-1, model, k-1)
	}
	acc, ll := m.Evaluate(d)
	fmt.Fprintf(w, "terrace: %s: %d examples, accuracy %.4f (%d/%d)  logloss %.4f\n",
		filepath.Base(dataPath), d.Len(), acc, int(acc*float64(d.Len())+0.5), d.Len(), ll)
	if out == "" {
		return nil
	}
	var line []byte
	return writeOut(out, func(bw *bufio.Writer) {
		m.Predictions(d, func(class int, p []float64) {
			line = strconv.AppendInt(line[:0], int64(class), 10)
			for _, v := range p {
				line = append(line, ' ')
				line = strconv.AppendFloat(line, v, 'f', 6, 64)
			}
			bw.Write(append(line, '\n'))
		})
	})
}

func predictMF(w io.Writer, dir, dataPath, out string) error {
	m, err := mf.LoadModel(dir)
	if err != nil {
		return fmt.Errorf("--model %s: %w", dir, err)
	}
	// Numbered as the model's ids: a string id the model lacks is
	// data.Unseen, which Predict counts with bias and factors 0.
	r, err := data.ReadRatingsWith(dataPath, m.UserIDs, m.ItemIDs)
	if err != nil {
		return fmt.Errorf("--data: %w", err)
	}
	if r.Len() == 0 {
		return fmt.Errorf("--data %s has no ratings", dataPath)
	}
	pred, truth := make([]float64, r.Len()), make([]float64, r.Len())
	for i := range pred {
		pred[i], truth[i] = m.Predict(r.Users[i], r.Items[i]), float64(r.Values[i])
	}
	fmt.Fprintf(w, "terrace: %s: %d ratings, RMSE %.4f\n", filepath.Base(dataPath), r.Len(), metrics.RMSE(pred, truth))
	if out == "" {
		return nil
	}
	return writeLines(out, len(pred), func(i int) float64 { return pred[i] })
}

// jobState says how far job st is: done, or its passes so far.
func jobState(st api.JobStatus) string {
	if st.Done {
		return fmt.Sprintf("done, %d passes", st.PassesDone)
	}
	return fmt.Sprintf("still training: %d of %d passes done", st.PassesDone, st.Job.Passes)
}
