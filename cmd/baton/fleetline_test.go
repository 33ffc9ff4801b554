package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/lock"
)

// TestFleetStatusLine: three simulated hosts, one run lease and two
// standby leases, standbys that poll once a minute. `baton status` shows
// the line of standbys waiting for the run lease in the order they came
// (h2 first, then h3), with each one's host, pid and time waited, in --json,
// in the text output and on the dashboard. It reads as a Redis user that
// may not write (ACL -@write): status writes nothing. When h1 leaves, h2
// holds the run lease and the line is h3 alone, now first.
func TestFleetStatusLine(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rdb := r.redis.Client()
	ctx := context.Background()
	if err := rdb.Do(ctx, "ACL", "SETUSER", "reader", "on", ">readpw", "~*", "&*", "+@all", "-@write").Err(); err != nil {
		t.Fatal(err)
	}
	readerURL := "redis://reader:readpw@" + r.redis.Addr + "/0"
	conf := filepath.Join(r.dir, "fleet.toml")
	if err := os.WriteFile(conf, []byte("lock_backend = \"redis\"\nslots = 1\nstandby_slots = 2\nlease_ttl = \"6s\"\nlease_renew = \"500ms\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	job := r.script("job.sh", "cat >/dev/null\n")
	args := func(h, lifetime string) []string {
		return r.fleetArgs(h, "--config", conf, "--poll-interval", "1m", "--standby-wait", "1m", "--lifetime", lifetime, "--jitter", "0s", "--", job)
	}
	type lineJSON struct {
		Position int    `json:"position"`
		Slot     int    `json:"slot"`
		Host     string `json:"host"`
		PID      int    `json:"pid"`
		WaitedMS int64  `json:"waited_ms"`
	}
	var st struct {
		Line  []lineJSON `json:"standby_line"`
		Stale int        `json:"standby_line_stale"`
	}
	status := func() {
		st.Line, st.Stale = nil, 0
		r.statusInto(&st, "--config", conf, "--redis-url", readerURL)
	}
	h1 := r.start(args("h1", "1m")...)
	eventually(t, 10*time.Second, "h1 holds the run lease", func() bool { return published(r.leases("default", 1)) == 1 })
	status()
	if len(st.Line) != 0 {
		t.Fatalf("line with no standby: %+v", st.Line)
	}
	h2 := r.start(args("h2", "1m")...)
	eventually(t, 10*time.Second, "h2 waits in line", func() bool { status(); return len(st.Line) == 1 })
	h3 := r.start(args("h3", "1m")...)
	eventually(t, 10*time.Second, "h3 waits in line", func() bool { status(); return len(st.Line) == 2 })
	h3Joined := time.Now()

	want := []struct {
		host string
		p    *process
	}{{"h2", h2}, {"h3", h3}}
	for i, w := range want {
		l := st.Line[i]
		if l.Position != i+1 || l.Host != w.host || l.PID != w.p.cmd.Process.Pid || l.Slot < 0 || l.Slot > 1 {
			t.Errorf("line[%d] = %+v, want position %d, host %s, pid %d, a standby slot", i, l, i+1, w.host, w.p.cmd.Process.Pid)
		}
	}
	if a, b := st.Line[0], st.Line[1]; a.Slot == b.Slot || a.WaitedMS <= b.WaitedMS || a.WaitedMS > time.Since(h2.start).Milliseconds()+50 {
		t.Errorf("line %+v: want two standby slots, h2 waiting longer than h3, and less than since it started", st.Line)
	}
	if st.Stale != 0 {
		t.Errorf("%d stale members, want 0", st.Stale)
	}

	// The text output: a row per standby, h2 first.
	out, errOut, code := r.baton("status", "--config", conf, "--redis-url", readerURL)
	if code != 0 {
		t.Fatalf("status exit %d: %s", code, errOut)
	}
	row := regexp.MustCompile(`(?m)^\s+(\d)\s+standby-\d\s+(h\d)\s+(\d+)\s+\d`)
	rows := row.FindAllStringSubmatch(out, -1)
	if !strings.Contains(out, "line  2 standbys waiting for a run lease") || len(rows) != 2 ||
		rows[0][2] != "h2" || rows[0][3] != fmt.Sprint(h2.cmd.Process.Pid) || rows[1][2] != "h3" {
		t.Errorf("status does not show the line h2, h3:\n%s", out)
	}

	// The dashboard, also as the reader.
	web, addr := r.serve("web", "--config", conf, "--redis-url", readerURL)
	var page string
	eventually(t, 10*time.Second, "the dashboard answers", func() bool {
		res, err := http.Get("http://" + addr + "/")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		page = string(b)
		return res.StatusCode == http.StatusOK
	})
	line := page[max(0, strings.Index(page, `id="standby-line"`)):]
	if i2, i3 := strings.Index(line, "<td>h2</td>"), strings.Index(line, "<td>h3</td>"); !strings.Contains(page, `id="standby-line"`) || i2 < 0 || i3 < i2 {
		t.Errorf("the dashboard does not show the line h2, h3:\n%s\n%s", page, web.log())
	}

	// h1 leaves (SIGTERM), handing its lease over: h2 holds the run
	// lease, h3 is first in line.
	_ = h1.cmd.Process.Signal(syscall.SIGTERM)
	if code := h1.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("h1 exit %d: %s", code, h1.log())
	}
	eventually(t, 5*time.Second, "h2 holds the run lease", func() bool {
		l := r.leases("default", 1)[0]
		return l.Held && l.Host == "h2"
	})
	waited := time.Since(h3Joined) // at least, by the time status reads it
	status()
	if len(st.Line) != 1 || st.Line[0].Host != "h3" || st.Line[0].Position != 1 || st.Line[0].WaitedMS < waited.Milliseconds()-50 {
		t.Errorf("after the hand-over the line is %+v, want h3 alone, first, waiting since it joined", st.Line)
	}
	if n, _ := rdb.ZCard(ctx, lock.LineKey("default")).Result(); n != 1 {
		t.Errorf("%d members in line in Redis, want 1", n)
	}
	r.drainAll(0)
}
