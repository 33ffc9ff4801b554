package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/baton-run/baton/work"
)

// Samples of the control group per run (issue 26's figures).
const (
	pauseTries  = 20  // pauses with 4 holders busy
	cancelTries = 50  // cancels of a running job, per mode
	waitTries   = 200 // work.Wait calls woken by an ack
)

// persistentGrace is the shutdown_grace of the persistent cancel figure:
// its child ignores the cancel frame, so it is killed after it.
const persistentGrace = time.Second

// control measures issue 26's controls with real processes:
//   - pause: 4 holders busy on jobs of 20 ms; `baton pause` runs, and the
//     figure is the last job start after it returned (ms; 0 or less: none
//     started after); then `baton resume`, and again;
//   - cancel: a running exec job whose shell ignores SIGTERM, under a holder
//     with shutdown_grace 0; the figure is from just before work.Cancel to
//     the job's process group gone (no member but zombies), on one host and
//     in a fleet (lock_backend redis, holders on two simulated hosts, the
//     cancel from the bench, which is neither);
//   - the same for a persistent child (the Python helper) whose handler
//     ignores the cancel frame, under shutdown_grace 1 s: the figure is
//     from the cancel to the child gone (killed, to be replaced);
//   - work.Wait: from a job's handler returning to Wait returning (the ack,
//     its notify and the BLPOP's wake-up), one job at a time.
//
// Its cost on the hot path, when no pause or cancel is in use, is the
// throughput group run against the tree before and after (docs/control.md).
func (b *bench) control(ctx context.Context) error {
	bins, err := b.binaries(ctx)
	if err != nil {
		return err
	}
	tries := func(n int) int {
		if b.cfg.Quick {
			return min(n, 5)
		}
		return n
	}
	for r := 1; r <= b.cfg.Runs; r++ {
		ps, err := pauseRun(ctx, b.srv, bins, tries(pauseTries))
		if err != nil {
			return fmt.Errorf("control pause, run %d: %w", r, err)
		}
		b.res.add("pause_last_start_p50_ms", "ms", percentile(ps, 50))
		b.res.add("pause_last_start_p99_ms", "ms", percentile(ps, 99))
		progress("run %d/%d  pause: last start after baton pause returned p50 %s ms, p99 %s ms, max %s ms (%d pauses, 4 holders)",
			r, b.cfg.Runs, num(percentile(ps, 50)), num(percentile(ps, 99)), num(slices.Max(ps)), len(ps))
		for _, mode := range []string{"exec", "exec_fleet", "persistent"} {
			cs, err := cancelRun(ctx, b.srv, bins, tries(cancelTries), mode)
			name := "cancel_" + mode
			if err != nil {
				return fmt.Errorf("control %s, run %d: %w", name, r, err)
			}
			b.res.add(name+"_gone_p50_ms", "ms", percentile(cs, 50))
			b.res.add(name+"_gone_p99_ms", "ms", percentile(cs, 99))
			progress("run %d/%d  %s: processes gone after the cancel p50 %s ms, p99 %s ms, max %s ms (%d cancels)",
				r, b.cfg.Runs, name, num(percentile(cs, 50)), num(percentile(cs, 99)), num(slices.Max(cs)), len(cs))
		}
		ws, err := waitRun(ctx, b.srv, tries(waitTries))
		if err != nil {
			return fmt.Errorf("control wait, run %d: %w", r, err)
		}
		b.res.add("wait_after_ack_p50_ms", "ms", percentile(ws, 50))
		b.res.add("wait_after_ack_p99_ms", "ms", percentile(ws, 99))
		progress("run %d/%d  work.Wait: returned after the handler returned p50 %s ms, p99 %s ms, max %s ms (%d waits)",
			r, b.cfg.Runs, num(percentile(ws, 50)), num(percentile(ws, 99)), num(slices.Max(ws)), len(ws))
	}
	return nil
}

// pauseRun pauses a queue that 4 holders work tries times and returns, for
// each pause, the last job start after `baton pause` returned, in ms.
func pauseRun(ctx context.Context, srv *redisServer, bins *binaries, tries int) ([]float64, error) {
	s, err := newScene(srv, "pause")
	if err != nil {
		return nil, err
	}
	defer s.close()
	rdb := srv.Client(1)
	defer rdb.Close()
	if err := fill(ctx, rdb, s.queue, 0); err != nil {
		return nil, err
	}
	// 4 holders × 50 jobs/s, about 0.5 s of work between pauses: plenty.
	if err := addJobs(ctx, rdb, s.queue, (tries+2)*400, "mark sleep=20ms"); err != nil {
		return nil, err
	}
	args := s.args("--slots", "4", "--lifetime", "10m", "--shutdown-grace", "5s")
	pids := map[int]bool{}
	for range 4 {
		c, err := s.start(bins.batonbench, args)
		if err != nil {
			return nil, err
		}
		pids[c.Process.Pid] = true
	}
	m := &marks{path: s.marks}
	ctl := func(verb string) error {
		out, err := exec.CommandContext(ctx, bins.baton, verb, "--queue", s.queue, "--redis-url", srv.URL()).CombinedOutput()
		if err != nil {
			return fmt.Errorf("baton %s: %v: %s", verb, err, out)
		}
		return nil
	}
	var vs []float64
	for i := 0; i < tries; i++ {
		// Busy: each of the 4 holders has started a job since the last resume.
		since := time.Now()
		if err := waitFor(20*time.Second, "4 holders busy", func() bool {
			m.poll()
			busy := map[int]bool{}
			for _, k := range m.all {
				if k.Kind == "S" && pids[k.PID] && k.At.After(since) {
					busy[k.PID] = true
				}
			}
			return len(busy) == 4
		}); err != nil {
			return nil, fmt.Errorf("%w\n%s", err, s.logTail(0))
		}
		if err := ctl("pause"); err != nil {
			return nil, err
		}
		returned := time.Now()
		// Watch 2 s (8 keeper rounds) for starts; one later than that
		// would show in the next try's busy wait, long after.
		time.Sleep(2 * time.Second)
		m.poll()
		last := since
		for _, k := range m.all {
			if k.Kind == "S" && k.At.After(last) {
				last = k.At
			}
		}
		vs = append(vs, float64(last.Sub(returned))/float64(time.Millisecond))
		if err := ctl("resume"); err != nil {
			return nil, err
		}
	}
	return vs, nil
}

// cancelRun cancels a running job tries times and returns, for each, the
// time from the cancel to its processes gone, in ms. mode "exec": an exec
// job's process group; "exec_fleet": the same in a fleet of two simulated
// hosts; "persistent": a persistent child that ignores the cancel frame.
func cancelRun(ctx context.Context, srv *redisServer, bins *binaries, tries int, mode string) ([]float64, error) {
	s, err := newScene(srv, "cancel")
	if err != nil {
		return nil, err
	}
	defer s.close()
	rdb := srv.Client(2)
	defer rdb.Close()
	if err := fill(ctx, rdb, s.queue, 0); err != nil {
		return nil, err
	}
	holders := 1
	if mode == "exec_fleet" {
		s.fleet("h1", "h2")
		holders = 2
	}
	pids := filepath.Join(s.dir, "pids")
	if err := os.Mkdir(pids, 0o755); err != nil {
		return nil, err
	}
	// The job's shell ignores SIGTERM and waits on two children of its
	// group: only SIGKILL to the group ends it.
	job := filepath.Join(s.dir, "job.sh")
	if err := os.WriteFile(job, []byte("#!/bin/sh\ncat >/dev/null\ntrap '' TERM\nsleep 60 & sleep 60 &\necho $$ > "+pids+"/$BATON_JOB_ID\nwait\n"), 0o755); err != nil {
		return nil, err
	}
	args := s.args("--slots", strconv.Itoa(holders), "--lifetime", "10m", "--shutdown-grace", "0", "--", job)
	gone := func(pid int) bool { return !groupAlive(pid) }
	if mode == "persistent" {
		if args, err = stubbornChild(s.dir, pids); err != nil {
			return nil, err
		}
		args = s.args(append([]string{"--lifetime", "10m", "--shutdown-grace", persistentGrace.String(), "--persistent", "--"}, args...)...)
		gone = func(pid int) bool { return !procAlive(pid) }
	}
	for range holders {
		if _, err := s.start(bins.baton, args); err != nil {
			return nil, err
		}
	}
	var vs []float64
	for i := 0; i < tries; i++ {
		id, err := work.Enqueue(ctx, rdb, s.queue, payload)
		if err != nil {
			return nil, err
		}
		var pgid int
		if err := waitFor(20*time.Second, "the job runs", func() bool {
			b, _ := os.ReadFile(filepath.Join(pids, id))
			pgid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			return pgid > 0
		}); err != nil {
			return nil, fmt.Errorf("%w\n%s", err, s.logTail(0))
		}
		t0 := time.Now()
		res, err := work.Cancel(ctx, rdb, s.queue, id)
		if err != nil {
			return nil, err
		}
		if res[0].Outcome != work.CancelRequested {
			return nil, fmt.Errorf("cancel of running job %s: %+v", id, res[0])
		}
		if err := waitFor(30*time.Second, "the job's processes are gone", func() bool { return gone(pgid) }); err != nil {
			return nil, err
		}
		vs = append(vs, float64(time.Since(t0))/float64(time.Millisecond))
		if err := waitFor(10*time.Second, "the job is dead-lettered as cancelled", func() bool {
			d, err := work.GetDead(ctx, rdb, s.queue, id)
			return err == nil && d.Reason == work.ReasonCancelled
		}); err != nil {
			return nil, err
		}
	}
	return vs, nil
}

// stubbornChild writes a persistent child for the Python helper whose
// handler writes its pid to dir/<job id> and ignores the cancel frame
// (it catches baton_worker.Cancelled and sleeps on), and returns its argv.
func stubbornChild(dir, pids string) ([]string, error) {
	examples, err := filepath.Abs(filepath.Join("..", "examples", "python"))
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(examples, "baton_worker.py")); err != nil {
		return nil, fmt.Errorf("run the bench from its directory, bench/: the persistent cancel runs ../examples/python: %w", err)
	}
	py := `import os, sys, time
sys.path.insert(0, ` + strconv.Quote(examples) + `)
import baton_worker

def handle(payload, job):
    with open(os.path.join(` + strconv.Quote(pids) + `, job.id), "w") as f:
        f.write(str(os.getpid()))
    try:
        time.sleep(3600)
    except baton_worker.Cancelled:
        time.sleep(3600)

baton_worker.serve(handle)
`
	path := filepath.Join(dir, "stubborn.py")
	if err := os.WriteFile(path, []byte(py), 0o644); err != nil {
		return nil, err
	}
	return []string{pythonBin, path}, nil
}

// procAlive reports whether process pid exists and is not a zombie.
func procAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// groupAlive reports whether process group pgid has a member that is not
// a zombie.
func groupAlive(pgid int) bool {
	ents, _ := os.ReadDir("/proc")
	want := strconv.Itoa(pgid)
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces.
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 2 && f[2] == want && f[0] != "Z" {
			return true
		}
	}
	return false
}
