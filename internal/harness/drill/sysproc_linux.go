package drill

import (
	"os"
	"syscall"
)

// sysProcAttr puts a child in a process group of its own, so that a
// terminal's Ctrl-C reaches only the drill, which then stops the children
// itself, and asks the kernel to SIGKILL the child when the thread that
// started it dies, so that a drill killed with SIGKILL leaves no orphans.
// The supervisor starts children from one goroutine locked to its thread,
// which lives as long as the supervisor.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup SIGKILLs the process group that p leads.
func killGroup(p *os.Process) error { return syscall.Kill(-p.Pid, syscall.SIGKILL) }

// killMethod says what killGroup does.
const killMethod = "SIGKILL to its process group"

// terminate asks p to leave and says how.
func terminate(p *os.Process) (string, error) { return "SIGTERM", p.Signal(syscall.SIGTERM) }

// interrupt asks p to end its run.
func interrupt(p *os.Process) error { return p.Signal(syscall.SIGINT) }
