// Command procstat watches a process and its children until it exits (or
// -timeout passes), then prints "CPU_SECONDS PEAK_RSS_KB PROCESSES": the
// user+system CPU time and the peak resident set size (VmHWM) of each
// process, as last read before it went away, summed over the process and
// every child seen (pmacctd forks its plugins). With -once it reads once
// and prints right away.
//
// The kernel keeps VmHWM for the life of a process but forgets it at exit,
// so it is polled: what a process does in its last -interval is missed.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clkTck is USER_HZ, which is 100 on every Linux architecture Go supports
// (the kernel exports times in /proc in these units whatever CONFIG_HZ is).
const clkTck = 100

type usage struct {
	cpuTicks uint64
	hwmKB    uint64
}

func main() {
	pid := flag.Int("pid", 0, "process to watch")
	interval := flag.Duration("interval", 100*time.Millisecond, "polling interval")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	once := flag.Bool("once", false, "read once and print")
	flag.Parse()
	log.SetFlags(0)
	if *pid <= 0 {
		log.Fatal("procstat: need -pid")
	}
	seen := map[int]usage{}
	deadline := time.Now().Add(*timeout)
	for {
		alive := poll(*pid, seen)
		if *once || !alive || time.Now().After(deadline) {
			break
		}
		time.Sleep(*interval)
	}
	var total usage
	for _, u := range seen {
		total.cpuTicks += u.cpuTicks
		total.hwmKB += u.hwmKB
	}
	fmt.Printf("%.2f %d %d\n", float64(total.cpuTicks)/clkTck, total.hwmKB, len(seen))
}

// poll reads the process and its children (recursively), records what it
// read, and reports whether the root process is still alive.
func poll(root int, seen map[int]usage) bool {
	alive := false
	todo := []int{root}
	for len(todo) > 0 {
		p := todo[0]
		todo = todo[1:]
		u, state, ok := read(p)
		if !ok || state == "Z" {
			continue
		}
		if p == root {
			alive = true
		}
		// A process on its way out has no memory left to report
		// (VmHWM missing): keep the last full reading.
		if u.hwmKB > 0 {
			prev := seen[p]
			seen[p] = usage{cpuTicks: max(prev.cpuTicks, u.cpuTicks), hwmKB: max(prev.hwmKB, u.hwmKB)}
		}
		todo = append(todo, children(p)...)
	}
	return alive
}

func read(pid int) (usage, string, bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return usage{}, "", false
	}
	// Fields after the command name, which is in parentheses and may
	// hold spaces: state is field 3, utime and stime fields 14 and 15.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return usage{}, "", false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return usage{}, "", false
	}
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	u := usage{cpuTicks: ut + st}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return usage{}, "", false
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			u.hwmKB, _ = strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return u, f[0], true
}

func children(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(s); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}
