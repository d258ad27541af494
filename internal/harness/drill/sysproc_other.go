//go:build !unix

package drill

import (
	"os"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

func killGroup(p *os.Process) error { return p.Kill() }

const killMethod = "kill"

// terminate kills p: there is no polite signal to send.
func terminate(p *os.Process) (string, error) { return "kill (no SIGTERM on this system)", p.Kill() }

// interrupt asks p to end its run.
func interrupt(p *os.Process) error { return p.Kill() }
