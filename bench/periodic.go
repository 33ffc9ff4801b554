package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/baton-run/baton/periodic"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

// The periodic group measures issue 25's figures with real processes:
//
//   - periodic_late_p50_ms, _p99_ms: an "@every 1s" entry claimed by two
//     holders (2 run slots); each tick's lateness is its job's id (Redis'
//     clock at the XADD) minus the tick, over PeriodicTicks ticks pooled;
//   - periodic_cmds_0, periodic_cmds_100: the commands an idle holder sends
//     to Redis per second (MONITOR, commands run inside scripts left out)
//     with no entry and with 100 entries; periodic_added_cmds the
//     difference, in turns, once per run; periodic_claims_100 the claim
//     script's calls among them (one a second); periodic_cpu_0 and _100 the CPU
//     time the holder and redis-server spend meanwhile, in ms per second;
//   - periodic_noop_0, periodic_noop_100: a holder's throughput (batonbench,
//     no-op jobs) with no entry and with 100 entries configured, in turns,
//     and periodic_noop_ratio, the second over the first, run by run;
//   - cron_silence_s: with schedule = "@every 2s" (C = 2 s), from a host's
//     last cron firing to the moment `baton status` calls it silent.
func (b *bench) periodic(ctx context.Context) error {
	bins, err := b.binaries(ctx)
	if err != nil {
		return err
	}
	p50, p99, err := periodicLateness(ctx, b.srv, bins, b.cfg.PeriodicTicks)
	if err != nil {
		return fmt.Errorf("periodic lateness: %w", err)
	}
	b.res.add("periodic_late_p50_ms", "ms", p50)
	b.res.add("periodic_late_p99_ms", "ms", p99)
	progress("periodic_late  p50 %s ms, p99 %s ms over %d ticks", num(p50), num(p99), b.cfg.PeriodicTicks)
	for r := 1; r <= b.cfg.Runs; r++ {
		var cmds, claims, cpu [2]float64
		for i, n := range []int{0, 100} {
			if cmds[i], claims[i], cpu[i], err = periodicCmds(ctx, b.srv, bins, n); err != nil {
				return fmt.Errorf("periodic_cmds_%d, run %d: %w", n, r, err)
			}
			b.res.add(fmt.Sprintf("periodic_cmds_%d", n), "cmds/s", cmds[i])
			b.res.add(fmt.Sprintf("periodic_cpu_%d", n), "ms/s", cpu[i])
		}
		b.res.add("periodic_added_cmds", "cmds/s", cmds[1]-cmds[0])
		b.res.add("periodic_claims_100", "calls/s", claims[1])
		progress("run %d/%d  periodic_cmds  %s/s with no entry, %s/s with 100 (claims %s/s); CPU (holder + Redis) %s and %s ms/s",
			r, b.cfg.Runs, num(cmds[0]), num(cmds[1]), num(claims[1]), num(cpu[0]), num(cpu[1]))
	}
	for r := 1; r <= b.cfg.Runs; r++ {
		var rate [2]float64
		order := []int{0, 1}
		if r%2 == 0 {
			order = []int{1, 0} // ABBA: neither goes always second
		}
		for _, i := range order {
			n := []int{0, 100}[i]
			// 20 × Jobs: a run lasts seconds, so that the holder
			// claims the entries' ticks several times during it.
			if rate[i], err = periodicRate(ctx, b.srv, bins, n, 20*b.cfg.Jobs); err != nil {
				return fmt.Errorf("periodic_noop_%d, run %d: %w", n, r, err)
			}
			b.res.add(fmt.Sprintf("periodic_noop_%d", n), "jobs/s", rate[i])
		}
		b.res.add("periodic_noop_ratio", "x", rate[1]/rate[0])
		progress("run %d/%d  periodic_noop  %s jobs/s with no entry, %s with 100 (%.3f)", r, b.cfg.Runs, num(rate[0]), num(rate[1]), rate[1]/rate[0])
	}
	for r := 1; r <= b.cfg.Runs; r++ {
		v, err := cronSilence(ctx, b.srv, bins)
		if err != nil {
			return fmt.Errorf("cron_silence, run %d: %w", r, err)
		}
		b.res.add("cron_silence_s", "s", v)
		progress("run %d/%d  cron_silence   %s s after the last firing (C = 2 s)", r, b.cfg.Runs, num(v))
	}
	return nil
}

// writeConfig writes a config file into the scene and returns its path.
func (s *scene) writeConfig(body string) (string, error) {
	p := filepath.Join(s.dir, "baton.toml")
	return p, os.WriteFile(p, []byte(body), 0o600)
}

// entries is n [[periodic]] entries that never fire during a run (once a
// year): the cost of checking them, not of their jobs.
func entries(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "[[periodic]]\nname = \"e%03d\"\nschedule = \"%d %d 1 1 *\"\npayload = \"noop\"\n", i, i%60, i/60)
	}
	return b.String()
}

// periodicLateness runs two holders with an "@every 1s" entry until ticks
// ticks are enqueued, and returns the lateness percentiles in ms.
func periodicLateness(ctx context.Context, srv *redisServer, bins *binaries, ticks int) (p50, p99 float64, err error) {
	s, err := newScene(srv, "periodic-late")
	if err != nil {
		return 0, 0, err
	}
	defer s.close()
	conf, err := s.writeConfig("[[periodic]]\nname = \"beat\"\nschedule = \"@every 1s\"\npayload = \"noop\"\n")
	if err != nil {
		return 0, 0, err
	}
	rdb := srv.Client(1)
	defer rdb.Close()
	if err := fill(ctx, rdb, s.queue, 0); err != nil {
		return 0, 0, err
	}
	for range 2 {
		if _, err := s.start(bins.batonbench, s.args("--config", conf, "--slots", "2", "--standby-slots", "0", "--lifetime", "1h")); err != nil {
			return 0, 0, err
		}
	}
	es := []periodic.Entry{{Name: "beat", Schedule: "@every 1s"}}
	if err := periodic.Check(es); err != nil {
		return 0, 0, err
	}
	seen := map[time.Time]float64{}
	var late []float64
	end := time.Now().Add(time.Duration(ticks)*time.Second + runTimeout)
	for len(late) < ticks {
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		if time.Now().After(end) {
			return 0, 0, fmt.Errorf("%d of %d ticks seen in time\n%s", len(late), ticks, s.logTail(0))
		}
		st, err := periodic.List(ctx, rdb, s.queue, es)
		if err != nil {
			return 0, 0, err
		}
		if t := st[0].LastJobTick; !t.IsZero() {
			if _, ok := seen[t]; !ok {
				ms, err := idMillis(st[0].LastJob)
				if err != nil {
					return 0, 0, err
				}
				seen[t] = float64(ms - t.UnixMilli())
				late = append(late, seen[t])
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	worst := 0
	for i, v := range late {
		if v > late[worst] {
			worst = i
		}
	}
	progress("periodic_late  the first 3 ticks: %v ms; the latest is tick %d of %d", late[:min(3, len(late))], worst+1, len(late))
	late = slices.Sorted(slices.Values(late))
	progress("periodic_late  the 5 latest ticks: %v ms", late[max(0, len(late)-5):])
	return percentile(late, 50), percentile(late, 99), nil
}

// idMillis is the time part of a stream id: Redis' clock at the XADD.
func idMillis(id string) (int64, error) {
	var ms, seq int64
	if _, err := fmt.Sscanf(id, "%d-%d", &ms, &seq); err != nil {
		return 0, fmt.Errorf("job id %q: %w", id, err)
	}
	return ms, nil
}

// periodicCmds runs an idle holder with n entries and counts the commands
// it sends per second over 10 s with MONITOR, after 2 s to settle and 10 s
// in which it measures the CPU time the holder and redis-server spend per
// second (ms/s).
func periodicCmds(ctx context.Context, srv *redisServer, bins *binaries, n int) (cmds, claims, cpu float64, err error) {
	s, err := newScene(srv, fmt.Sprintf("periodic-cmds-%d", n))
	if err != nil {
		return 0, 0, 0, err
	}
	defer s.close()
	conf, err := s.writeConfig(entries(n))
	if err != nil {
		return 0, 0, 0, err
	}
	rdb := srv.Client(1)
	defer rdb.Close()
	if err := fill(ctx, rdb, s.queue, 0); err != nil {
		return 0, 0, 0, err
	}
	h, err := s.start(bins.batonbench, s.args("--config", conf, "--slots", "1", "--standby-slots", "0", "--lifetime", "1h"))
	if err != nil {
		return 0, 0, 0, err
	}
	if err := waitFor(10*time.Second, "the holder takes its slot", func() bool { return s.holderPID("run", 0) != 0 }); err != nil {
		return 0, 0, 0, fmt.Errorf("%w\n%s", err, s.logTail(0))
	}
	time.Sleep(2 * time.Second)
	const window = 10 * time.Second
	cpu0, err := cpuTime(ctx, rdb, h.Process.Pid)
	if err != nil {
		return 0, 0, 0, err
	}
	time.Sleep(window) // CPU first: MONITOR costs Redis for every command it copies
	cpu1, err := cpuTime(ctx, rdb, h.Process.Pid)
	if err != nil {
		return 0, 0, 0, err
	}
	c, k, err := monitor(ctx, srv.Addr, window)
	if err != nil {
		return 0, 0, 0, err
	}
	return float64(c) / window.Seconds(), float64(k) / window.Seconds(), float64((cpu1 - cpu0).Milliseconds()) / window.Seconds(), nil
}

// cpuTime is the CPU time (user and system) process pid and redis-server
// have used so far.
func cpuTime(ctx context.Context, rdb *redis.Client, pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command's closing parenthesis: state is the 3rd
	// field of stat, utime and stime the 14th and 15th, in clock ticks
	// (100 a second on Linux).
	_, rest, _ := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	var ut, st int64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &st)
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var rs float64
	for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
		if i := strings.Index(info, k); i >= 0 {
			var v float64
			fmt.Sscan(strings.TrimSpace(strings.SplitN(info[i+len(k):], "\n", 2)[0]), &v)
			rs += v
		}
	}
	return time.Duration(ut+st)*10*time.Millisecond + time.Duration(rs*float64(time.Second)), nil
}

// monitor counts the commands clients send to Redis during d (MONITOR
// shows those a script runs too, as from "lua": they are left out).
func monitor(ctx context.Context, addr string, d time.Duration) (n, claims int, err error) {
	var dl net.Dialer
	conn, err := dl.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		return 0, 0, err
	}
	_ = conn.SetReadDeadline(time.Now().Add(d))
	r := bufio.NewReader(conn)
	if l, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		return 0, 0, fmt.Errorf("monitor: %q %v", l, err)
	}
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				return n, claims, nil
			}
			return 0, 0, fmt.Errorf("monitor: %w", err)
		}
		// +1700000000.123456 [0 127.0.0.1:54321] "evalsha" ...
		_, rest, _ := strings.Cut(l, "[")
		if f := strings.Fields(rest); len(f) > 1 && !strings.HasPrefix(f[1], "lua") {
			n++
			if strings.Contains(rest, ":periodic\"") { // the claim names the records' key
				claims++
			}
		}
	}
}

// periodicRate is a batonbench holder's throughput over jobs no-op jobs with
// n entries configured: from the first job acknowledged to the last.
func periodicRate(ctx context.Context, srv *redisServer, bins *binaries, n, jobs int) (float64, error) {
	s, err := newScene(srv, fmt.Sprintf("periodic-noop-%d", n))
	if err != nil {
		return 0, err
	}
	defer s.close()
	conf, err := s.writeConfig(entries(n))
	if err != nil {
		return 0, err
	}
	rdb := srv.Client(1)
	defer rdb.Close()
	if err := fill(ctx, rdb, s.queue, jobs); err != nil {
		return 0, err
	}
	h, err := s.start(bins.batonbench, s.args("--config", conf, "--slots", "1", "--standby-slots", "0", "--lifetime", "1h"))
	if err != nil {
		return 0, err
	}
	stream := work.KeysFor(s.queue).Stream
	var first time.Time
	for end := time.Now().Add(runTimeout); ; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(end) || h.ProcessState != nil || ctx.Err() != nil {
			return 0, fmt.Errorf("%d jobs not done\n%s", jobs, s.logTail(0))
		}
		left, err := rdb.XLen(ctx, stream).Result()
		if err != nil {
			return 0, err
		}
		if first.IsZero() && left < int64(jobs) {
			first = time.Now()
		}
		if left == 0 {
			break
		}
	}
	elapsed := time.Since(first)
	if err := drained(ctx, rdb, s.queue); err != nil {
		return 0, err
	}
	if err := stop(h); err != nil {
		return 0, fmt.Errorf("holder: %v\n%s", err, s.logTail(0))
	}
	return float64(jobs) / elapsed.Seconds(), nil
}

// cronSilence fires candidates every C = 2 s on host "bench" with a holder
// running, stops, and returns the seconds from the host's last firing (as
// status reads it) to the first `baton status` that calls the host silent.
func cronSilence(ctx context.Context, srv *redisServer, bins *binaries) (float64, error) {
	s, err := newScene(srv, "cron-silence")
	if err != nil {
		return 0, err
	}
	defer s.close()
	conf, err := s.writeConfig("schedule = \"@every 2s\"\n")
	if err != nil {
		return 0, err
	}
	rdb := srv.Client(1)
	defer rdb.Close()
	if err := fill(ctx, rdb, s.queue, 0); err != nil {
		return 0, err
	}
	run := s.args("--config", conf, "--host", "bench", "--slots", "1", "--standby-slots", "0", "--lifetime", "1h", "--", "true")
	h, err := s.start(bins.baton, run)
	if err != nil {
		return 0, err
	}
	if err := waitFor(10*time.Second, "the holder takes its slot", func() bool { return s.holderPID("run", 0) == h.Process.Pid }); err != nil {
		return 0, fmt.Errorf("%w\n%s", err, s.logTail(0))
	}
	for i := range 3 { // cron: a candidate every 2 s, each losing to the holder
		if i > 0 {
			time.Sleep(2 * time.Second)
		}
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		out, err := exec.CommandContext(cctx, bins.baton, run...).CombinedOutput()
		cancel()
		if err != nil {
			return 0, fmt.Errorf("candidate: %v: %s", err, out)
		}
	}
	status := append([]string{"status", "--json"}, s.args("--config", conf)[1:]...)
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		out, err := exec.CommandContext(ctx, bins.baton, status...).Output()
		if err != nil {
			return 0, fmt.Errorf("status: %v: %s", err, out)
		}
		at := time.Now()
		var rep struct {
			CronFires []struct {
				Host   string    `json:"host"`
				Last   time.Time `json:"last_fire"`
				Silent bool      `json:"silent"`
			} `json:"cron_fires"`
		}
		if err := json.Unmarshal(out, &rep); err != nil {
			return 0, fmt.Errorf("status: %w", err)
		}
		for _, f := range rep.CronFires {
			if f.Host == "bench" && f.Silent {
				return at.Sub(f.Last).Seconds(), nil
			}
		}
	}
	return 0, fmt.Errorf("status never called the host silent\n%s", s.logTail(0))
}
