// Package proccpu reads how much CPU time another process on this machine
// has used, from /proc. The text indexer counts the CPU its PostgreSQL
// backend spends (package textindex): that backend is another process,
// which no rusage call of ours covers.
package proccpu

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// ticksPerSecond is the unit of utime and stime in /proc/<pid>/stat
// (USER_HZ): 100 on every Linux architecture Go runs on, whatever the
// kernel's own HZ.
const ticksPerSecond = 100

// Resolution is the granularity of what Of reports.
const Resolution = time.Second / ticksPerSecond

// Of returns the CPU time (user and system) process pid has used so far,
// provided its command name (/proc/<pid>/comm) is comm: a pid alone could
// name an unrelated process when the one meant runs on another machine or
// in another pid namespace. ok is false when it cannot tell: no /proc, no
// such process, another command.
func Of(pid int, comm string) (cpu time.Duration, ok bool) {
	if pid <= 0 {
		return 0, false
	}
	dir := "/proc/" + strconv.Itoa(pid)
	name, err := os.ReadFile(dir + "/comm")
	if err != nil || string(bytes.TrimSpace(name)) != comm {
		return 0, false
	}
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return 0, false
	}
	ticks, err := ParseStat(stat)
	if err != nil {
		return 0, false
	}
	return time.Duration(ticks) * Resolution, true
}

// ParseStat returns utime+stime, in clock ticks, from the contents of a
// /proc/<pid>/stat file. The command name (field 2) is in parentheses and
// may itself hold spaces and parentheses, so the fields are counted from
// the last ')'.
func ParseStat(b []byte) (int64, error) {
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return 0, errors.New("proccpu: no command name in /proc stat")
	}
	// After ") " come field 3 (state) onwards; utime and stime are
	// fields 14 and 15, so the 12th and 13th of these.
	fields := bytes.Fields(b[end+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("proccpu: /proc stat has %d fields after the command name, want at least 13", len(fields))
	}
	var sum int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(string(f), 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("proccpu: /proc stat CPU field %q is not a tick count", f)
		}
		sum += n
	}
	if sum < 0 {
		return 0, errors.New("proccpu: /proc stat CPU ticks overflow")
	}
	return sum, nil
}
