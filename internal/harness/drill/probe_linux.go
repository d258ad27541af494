package drill

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// userHZ is the unit of /proc's processor times: USER_HZ, 100 on every
// Linux architecture Go supports (the kernel scales to it whatever its
// own tick).
const userHZ = 100

// processCPUSeconds reads /proc/PID/stat's utime and stime.
func processCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// count fields after its closing one.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("drill: /proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("drill: /proc/%d/stat: %d fields", pid, len(f)+2)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("drill: /proc/%d/stat: bad utime or stime", pid)
	}
	return float64(ut+st) / userHZ, nil
}

// hostCPU reads /proc/stat's first line (every processor's times) and
// counts the cpuN lines.
func hostCPU() (float64, int, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var busy float64
	n := 0
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		switch {
		case len(fs) > 5 && fs[0] == "cpu":
			// user nice system idle iowait irq softirq steal ...
			for i, v := range fs[1:] {
				if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest times are in user already
					continue
				}
				x, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					return 0, 0, fmt.Errorf("drill: /proc/stat: %q", v)
				}
				busy += float64(x)
			}
		case strings.HasPrefix(fs[0], "cpu") && len(fs[0]) > 3:
			n++
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if n == 0 {
		return 0, 0, fmt.Errorf("drill: /proc/stat: no processors")
	}
	return busy / userHZ, n, nil
}
