package drill

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const orphanHelperEnv = "TERRACE_DRILL_ORPHAN_HELPER"

// TestOrphanHelper is not a test: run by TestKilledDrillLeavesNoChildren
// with orphanHelperEnv set, it starts two children under a supervisor,
// prints their pids and waits to be killed.
func TestOrphanHelper(t *testing.T) {
	if os.Getenv(orphanHelperEnv) != "1" {
		t.Skip("helper process")
	}
	// The parent's directory: this process is killed, and would leave its own.
	s := newSupervisor("/bin/sh", os.Getenv(orphanHelperEnv+"_DIR"), func(*proc, string) bool { return false })
	var pids []string
	for i := range 2 {
		p, err := s.start(fmt.Sprintf("c%d", i), Server, "-c", "exec sleep 300")
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		pids = append(pids, strconv.Itoa(p.pid()))
	}
	fmt.Println("pids", strings.Join(pids, " "))
	os.Stdin.Read(make([]byte, 1)) // until killed
	os.Exit(0)
}

// TestKilledDrillLeavesNoChildren SIGKILLs a process that supervises two
// children and checks that the kernel kills them too. This test process
// becomes a child subreaper, so the orphans become its children and it can
// wait for them.
func TestKilledDrillLeavesNoChildren(t *testing.T) {
	if os.Getenv(orphanHelperEnv) == "1" {
		t.Skip("in the helper")
	}
	const prSetChildSubreaper = 36
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		t.Skipf("cannot become a subreaper: %v", errno)
	}
	defer syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 0, 0)

	helper := exec.Command(os.Args[0], "-test.run=^TestOrphanHelper$")
	helper.Env = append(os.Environ(), orphanHelperEnv+"=1", orphanHelperEnv+"_DIR="+t.TempDir())
	stdin, err := helper.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 3 || f[0] != "pids" {
		helper.Process.Kill()
		helper.Wait()
		t.Fatalf("helper said %q, %v", line, err)
	}
	helper.Process.Kill()
	helper.Wait()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for _, s := range f[1:] {
		pid, _ := strconv.Atoi(s)
		died := make(chan syscall.WaitStatus, 1)
		go func() {
			var ws syscall.WaitStatus
			_, err := syscall.Wait4(pid, &ws, 0, nil)
			if errors.Is(err, syscall.ECHILD) {
				// The helper can reap a child in its own last moments,
				// when the child's death signal beats the helper's.
				if _, serr := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(serr, os.ErrNotExist) {
					ws = syscall.WaitStatus(syscall.SIGKILL) // gone: it died
					err = nil
				}
			}
			if err != nil {
				t.Errorf("wait for %d: %v", pid, err)
			}
			died <- ws
		}()
		select {
		case ws := <-died:
			if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Errorf("child %d: %v, want killed by SIGKILL", pid, ws)
			}
		case <-deadline.C:
			deadline.Reset(0)
			syscall.Kill(pid, syscall.SIGKILL)
			<-died
			t.Errorf("child %d still ran 30s after its supervisor was killed", pid)
		}
	}
}
