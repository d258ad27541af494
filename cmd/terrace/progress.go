package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/terrace-ml/terrace/internal/control/api"
)

// Progress of a training run, read from the coordinator's status: a bar
// with rate and ETA when out is a terminal, a plain line every
// plainEvery otherwise (a log file, CI).

const (
	barEvery   = 250 * time.Millisecond
	plainEvery = 5 * time.Second
)

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	if p, ok := w.(*progressOut); ok {
		w = p.w
	}
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progressOut is the run's output with a progress bar on its last line:
// a line the run prints first erases the bar, which the next update
// draws again below it.
type progressOut struct {
	mu     sync.Mutex
	w      io.Writer
	hasBar bool
}

func (p *progressOut) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hasBar {
		io.WriteString(p.w, "\r\033[K")
	}
	return p.w.Write(b)
}

// barSink is where the bar draws itself.
type barSink struct{ p *progressOut }

func (s barSink) Write(b []byte) (int, error) {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	s.p.hasBar = true
	return s.p.w.Write(b)
}

// showProgress follows the coordinator at addr until the returned stop
// is called; passes is how many passes the job trains (0: unknown).
func showProgress(ctx context.Context, out *progressOut, addr string, passes int) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	cc := api.NewClient(addr, nil)
	cc.RetryFor = time.Second
	tty := isTerminal(out)
	go func() {
		defer close(done)
		var bar *progressbar.ProgressBar
		every := plainEvery
		if tty {
			every = barEvery
		}
		t := time.NewTicker(every)
		defer t.Stop()
		start := time.Now()
		for {
			select {
			case <-ctx.Done():
				if bar != nil {
					bar.Finish()
					fmt.Fprintln(out)
				}
				return
			case <-t.C:
			}
			st, err := cc.Status(ctx)
			if err != nil || st.Job.Partitions == 0 {
				continue
			}
			j := st.Job
			total := int64(max(passes, j.Pass+1) * j.Partitions)
			cur := int64(j.Pass*j.Partitions + j.Done)
			desc := fmt.Sprintf("pass %d/%s · %s rows/s", j.Pass+1, orUnknown(passes), humanRate(j.Rate))
			if !tty {
				eta := "-"
				if cur > 0 && passes > 0 {
					el := time.Since(start)
					eta = (time.Duration(float64(el) * float64(total-cur) / float64(cur))).Round(time.Second).String()
				}
				fmt.Fprintf(out, "terrace: progress %s, partitions %d/%d of the pass, %d examples, eta %s\n", desc, j.Done, j.Partitions, j.Examples, eta)
				continue
			}
			if bar == nil {
				bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(barSink{out}), progressbar.OptionSetPredictTime(true),
					progressbar.OptionSetElapsedTime(true), progressbar.OptionShowCount(), progressbar.OptionSetItsString("partitions"),
					progressbar.OptionSetWidth(30), progressbar.OptionThrottle(barEvery))
			}
			bar.ChangeMax64(total)
			bar.Describe(desc)
			bar.Set64(cur)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

func orUnknown(n int) string {
	if n <= 0 {
		return "?"
	}
	return fmt.Sprint(n)
}

func humanRate(r float64) string {
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.1fM", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.1fk", r/1e3)
	}
	return fmt.Sprintf("%.0f", r)
}

// stepBar shows how far work counted in steps (benchmark runs, replays)
// has come: on a terminal, a bar with its rate and ETA below the lines
// the work prints; elsewhere nothing more, the work's own lines being the
// plain periodic progress. Print the work's lines to out; call set with
// the steps done (fractions allowed) of total, and finish at the end.
func stepBar(w io.Writer, what string) (out io.Writer, set func(done float64, total int), finish func()) {
	if !isTerminal(w) {
		return w, func(float64, int) {}, func() {}
	}
	pout := &progressOut{w: w}
	// Steps in thousandths: the bar counts integers, and a replay reports
	// fractions of a run.
	const scale = 1000
	var mu sync.Mutex
	var bar *progressbar.ProgressBar
	finished := false
	set = func(done float64, total int) {
		mu.Lock()
		defer mu.Unlock()
		if finished {
			return
		}
		if bar == nil {
			bar = progressbar.NewOptions64(int64(total)*scale, progressbar.OptionSetWriter(barSink{pout}), progressbar.OptionSetPredictTime(true),
				progressbar.OptionSetElapsedTime(true), progressbar.OptionSetDescription(what), progressbar.OptionSetWidth(30),
				progressbar.OptionThrottle(barEvery))
		}
		bar.ChangeMax64(int64(total) * scale)
		bar.Describe(fmt.Sprintf("%s %.1f/%d", what, done, total))
		bar.Set64(int64(done * scale))
	}
	finish = func() {
		mu.Lock()
		defer mu.Unlock()
		if bar != nil && !finished {
			bar.Finish()
			fmt.Fprintln(pout)
		}
		finished = true
	}
	return pout, set, finish
}
