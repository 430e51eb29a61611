package harness

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// userHZ is the unit of the times in /proc/PID/stat: USER_HZ, which the
// kernel fixes at 100 for every architecture's /proc interface.
const userHZ = 100

// ProcCPU is a process's CPU time from /proc/PID/stat, in seconds.
type ProcCPU struct {
	User, Sys float64 // utime, stime: the process's own threads
	// ChildUser, ChildSys are cutime, cstime: its children that it
	// waited for.
	ChildUser, ChildSys float64
}

// Total is all four: the process and the children it reaped.
func (c ProcCPU) Total() float64 { return c.User + c.Sys + c.ChildUser + c.ChildSys }

// ReadProcCPU reads /proc/PID/stat.
func ReadProcCPU(pid int) (ProcCPU, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcCPU{}, err
	}
	return ParseStat(string(b))
}

// CPUSeconds is a running Proc's CPU-seconds so far, the children it
// reaped included; an error if it has exited.
func (p *Proc) CPUSeconds() (float64, error) {
	if p.Exited() {
		return 0, fmt.Errorf("%s exited: %v", p.Name(), p.Err())
	}
	c, err := ReadProcCPU(p.Pid())
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p.Name(), err)
	}
	return c.Total(), nil
}

// ParseStat parses the text of /proc/PID/stat. The command name, field
// 2, is in parentheses and may hold spaces and parentheses itself, so
// the fields are counted from the last ')': utime, stime, cutime and
// cstime are fields 14 to 17 (proc(5)).
func ParseStat(s string) (ProcCPU, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ProcCPU{}, fmt.Errorf("/proc stat %.40q: no command name", s)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3, the state
	const first = 14 - 3
	if len(f) < first+4 {
		return ProcCPU{}, fmt.Errorf("/proc stat: %d fields after the command name, want at least %d", len(f), first+4)
	}
	var v [4]float64
	for k := range v {
		n, err := strconv.ParseUint(f[first+k], 10, 64)
		if err != nil {
			return ProcCPU{}, fmt.Errorf("/proc stat field %d: %w", 14+k, err)
		}
		v[k] = float64(n) / userHZ
	}
	return ProcCPU{User: v[0], Sys: v[1], ChildUser: v[2], ChildSys: v[3]}, nil
}
