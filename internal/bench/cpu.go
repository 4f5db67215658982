package bench

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU accounting, as bench-limits does it: user+system seconds of this
// process (getrusage), of the dlq subprocess (/proc/<pid>/stat), and of
// every process owned by the rabbitmq and postgres users, sampled before
// and after the measured part while its connections are open.

// procStatusKB reads a "Name: N kB" line of /proc/<pid>/status.
func procStatusKB(pid int, name string) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}
			return strconv.ParseFloat(f[0], 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", name, pid)
}

const clkTck = 100.0 // getconf CLK_TCK on Linux

// cpuSnap holds the CPU seconds of the RabbitMQ and PostgreSQL processes:
// totals, and by pid. Prefer since over subtracting totals: a process that
// exits between two snapshots (a backend of another client on a shared
// machine) takes its seconds with it and can make a total's difference
// negative.
type cpuSnap struct {
	rmqSec, pgSec float64
	rmq, pg       map[int]float64
}

// since returns the CPU seconds RabbitMQ and PostgreSQL used since s0:
// the growth of processes in both snapshots plus all of new ones.
func (s cpuSnap) since(s0 cpuSnap) (rmq, pg float64) {
	diff := func(now, before map[int]float64) float64 {
		var sum float64
		for pid, sec := range now {
			sum += max(sec-before[pid], 0)
		}
		return sum
	}
	return diff(s.rmq, s0.rmq), diff(s.pg, s0.pg)
}

// cpuMeter takes snapshots of the CPU time of the processes of the
// rabbitmq and postgres users.
type cpuMeter struct {
	rmqUID, pgUID uint32
}

// newCPUMeter looks the two users up; a missing one is warned about, and
// its CPU not counted.
func newCPUMeter() cpuMeter {
	m := cpuMeter{rmqUID: ^uint32(0), pgUID: ^uint32(0)}
	for name, dst := range map[string]*uint32{"rabbitmq": &m.rmqUID, "postgres": &m.pgUID} {
		u, err := user.Lookup(name)
		if err != nil {
			fmt.Fprintf(os.Stderr, "warning: no %s user, its CPU is not counted: %v\n", name, err)
			continue
		}
		v, _ := strconv.Atoi(u.Uid)
		*dst = uint32(v)
	}
	return m
}

func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec) + float64(ru.Utime.Usec)/1e6 + float64(ru.Stime.Sec) + float64(ru.Stime.Usec)/1e6
}

// procCPU returns the user+system seconds of process pid.
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("unreadable /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / clkTck, nil
}

func (m cpuMeter) take() cpuSnap {
	s := cpuSnap{rmq: map[int]float64{}, pg: map[int]float64{}}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		fi, err := os.Stat(d)
		if err != nil {
			continue
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || (st.Uid != m.rmqUID && st.Uid != m.pgUID) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		sec, err := procCPU(pid)
		if err != nil {
			continue
		}
		if st.Uid == m.rmqUID {
			s.rmq[pid] = sec
			s.rmqSec += sec
		} else {
			s.pg[pid] = sec
			s.pgSec += sec
		}
	}
	return s
}

// backendsCPU sums the CPU time of processes (PostgreSQL runs on this
// machine).
func backendsCPU(pids []int) time.Duration {
	var sec float64
	for _, pid := range pids {
		if c, err := procCPU(pid); err == nil {
			sec += c
		}
	}
	return time.Duration(sec * float64(time.Second))
}
