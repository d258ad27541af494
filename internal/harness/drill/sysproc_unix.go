//go:build unix && !linux

package drill

import (
	"os"
	"syscall"
)

// sysProcAttr puts a child in a process group of its own. Without Linux's
// parent-death signal, a drill killed with SIGKILL leaves its children
// running (a known gap off Linux).
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// killGroup SIGKILLs the process group that p leads.
func killGroup(p *os.Process) error { return syscall.Kill(-p.Pid, syscall.SIGKILL) }

const killMethod = "SIGKILL to its process group"

// terminate asks p to leave and says how.
func terminate(p *os.Process) (string, error) { return "SIGTERM", p.Signal(syscall.SIGTERM) }

// interrupt asks p to end its run.
func interrupt(p *os.Process) error { return p.Signal(syscall.SIGINT) }
