package main

import (
	"bufio"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// machine describes where the figures were measured.
type machine struct {
	Date   string `json:"date"`
	CPUs   int    `json:"nproc"`
	CPU    string `json:"cpu"`
	MemMB  int    `json:"mem_mb"`
	Kernel string `json:"kernel"`
	Go     string `json:"go"`
	Redis  string `json:"redis"`
	Asynq  string `json:"asynq"`
}

func describe(redisVersion string) machine {
	m := machine{
		Date:  time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		CPUs:  runtime.NumCPU(),
		CPU:   procField("/proc/cpuinfo", "model name"),
		Go:    runtime.Version(),
		Redis: redisVersion,
		Asynq: "unknown",
	}
	if kb, err := strconv.Atoi(strings.Fields(procField("/proc/meminfo", "MemTotal") + " 0")[0]); err == nil {
		m.MemMB = kb / 1024
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/hibiken/asynq" {
				m.Asynq = d.Version
			}
		}
	}
	return m
}

// procField returns the value of the first "key: value" line of a /proc file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func (m machine) String() string {
	return strconv.Itoa(m.CPUs) + " × " + m.CPU + ", " + strconv.Itoa(m.MemMB) + " MB RAM, Linux " + m.Kernel +
		", " + m.Go + ", Redis " + m.Redis + ", asynq " + m.Asynq
}
