package drill

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"time"
)

// proc is one child process.
type proc struct {
	name string
	role Role
	cmd  *exec.Cmd
	log  string

	exited  chan struct{} // closed once the process has been waited for
	waitErr error         // set before exited is closed

	mu        sync.Mutex
	lastStats string // a server's last "stats" line
	statsAt   time.Time
	evictAddr string // the eviction endpoint it announced

	// Owned by the drill's loop.
	machine string // with Config.Tiers: the machine it runs on
	class   Role   // and that machine's class
	rank    int    // -1 until the worker says
	faulted Action
	handled bool // the loop has dealt with its exit
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) done() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// line is a line of a child's output that the drill acts on.
type line struct {
	p    *proc
	text string
}

// supervisor starts children, copies each one's output to its log file,
// hands the lines that match interesting to its loop, and reports exits.
// close kills whatever still runs.
type supervisor struct {
	binary, dir string
	interesting func(p *proc, text string) bool

	lines chan line
	exits chan *proc
	stop  chan struct{}
	spawn chan spawnReq
	wg    sync.WaitGroup
	procs []*proc
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func newSupervisor(binary, dir string, interesting func(*proc, string) bool) *supervisor {
	s := &supervisor{
		binary: binary, dir: dir, interesting: interesting,
		lines: make(chan line, 64), exits: make(chan *proc, 16),
		stop: make(chan struct{}), spawn: make(chan spawnReq),
	}
	s.wg.Add(1)
	go s.spawner()
	return s
}

// spawner starts every child from one OS thread that stays alive until
// the supervisor closes: Linux's parent-death signal fires when the
// thread that forked the child exits, not the process.
func (s *supervisor) spawner() {
	defer s.wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for {
		select {
		case r := <-s.spawn:
			r.done <- r.cmd.Start()
		case <-s.stop:
			return
		}
	}
}

// start runs the binary with args as node name, its output going to
// name.log in the run directory.
func (s *supervisor) start(name string, role Role, args ...string) (*proc, error) {
	logPath := filepath.Join(s.dir, name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("drill: %s: %w", name, err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("drill: %s: %w", name, err)
	}
	cmd := exec.Command(s.binary, args...)
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = sysProcAttr()
	fmt.Fprintf(logf, "# %s %q\n", s.binary, args)
	req := spawnReq{cmd: cmd, done: make(chan error, 1)}
	select {
	case s.spawn <- req:
		err = <-req.done
	case <-s.stop:
		err = errors.New("supervisor closed")
	}
	pw.Close() // the child holds its own copy
	if err != nil {
		pr.Close()
		logf.Close()
		return nil, fmt.Errorf("drill: start %s: %w", name, err)
	}
	p := &proc{name: name, role: role, cmd: cmd, log: logPath, exited: make(chan struct{}), rank: -1}
	s.procs = append(s.procs, p)
	s.wg.Add(2)
	go s.pump(p, pr, logf)
	go func() {
		defer s.wg.Done()
		p.waitErr = cmd.Wait()
		close(p.exited)
		select {
		case s.exits <- p:
		case <-s.stop:
		}
	}()
	return p, nil
}

// pump copies the child's output to its log until the child and anything
// it started have closed the pipe.
func (s *supervisor) pump(p *proc, r *os.File, logf *os.File) {
	defer s.wg.Done()
	defer r.Close()
	defer logf.Close()
	br := bufio.NewReader(r)
	for {
		b, err := br.ReadBytes('\n')
		if len(b) > 0 {
			logf.Write(b)
			if b[len(b)-1] == '\n' {
				text := string(b[:len(b)-1])
				if s.interesting(p, text) {
					select {
					case s.lines <- line{p, text}:
					case <-s.stop:
					}
				}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				fmt.Fprintf(logf, "# drill: reading output: %v\n", err)
			}
			return
		}
	}
}

// kill SIGKILLs p's process group unless p has been waited for already
// (its group could then be gone and its number reused).
func (s *supervisor) kill(p *proc) error {
	if p.done() {
		return nil
	}
	return killGroup(p.cmd.Process)
}

// stopAll interrupts every child still running (SIGINT ends a node's run
// without the drain that SIGTERM starts) and kills those that have not
// exited within grace.
func (s *supervisor) stopAll(grace time.Duration) {
	for _, p := range s.procs {
		if !p.done() {
			interrupt(p.cmd.Process)
		}
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	for _, p := range s.procs {
		select {
		case <-p.exited:
		case <-t.C:
			t.Reset(0) // past the grace: kill the rest at once
			s.kill(p)
			<-p.exited
		}
	}
}

// close kills every child still running and waits for the supervisor's
// goroutines.
func (s *supervisor) close() {
	for _, p := range s.procs {
		s.kill(p)
	}
	close(s.stop)
	s.wg.Wait()
}
