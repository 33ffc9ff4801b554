package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMetricsListen: baton metrics --listen serves /metrics, reads Redis at
// each scrape (baton_up goes to 0 when Redis stops, and the server stays
// up), and exits 0 on SIGTERM.
func TestMetricsListen(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.baton("enqueue", "a", "b", "c")
	p, addr := r.serve("metrics", "--lock-dir", r.locks)
	get := func() string {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	var body string
	eventually(t, 10*time.Second, "metrics served", func() bool { body = get(); return body != "" })
	for _, want := range []string{`baton_up{queue="default"} 1`, `baton_jobs{queue="default",state="waiting"} 3`} {
		if !strings.Contains(body, want) {
			t.Fatalf("want %q in:\n%s", want, body)
		}
	}
	r.redis.Stop()
	if body = get(); !strings.Contains(body, `baton_up{queue="default"} 0`) {
		t.Fatalf("Redis stopped: want baton_up 0 in:\n%s", body)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM: %s", code, p.log())
	}
}

// TestStatusWatch: status --watch --json prints one JSON document per
// refresh (NDJSON) with rates and slot events, takes no slot, and exits 0
// on SIGINT.
func TestStatusWatch(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.baton("enqueue", "a", "b")
	cmd := r.cmd("status", "--watch", "--json", "--interval", "200ms")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	type refresh struct {
		Run    []slotJSON
		Jobs   struct{ Done int64 }
		Rates  map[string]float64 `json:"rates_per_second"`
		Events []struct{ Kind, Slot string }
	}
	dec := json.NewDecoder(out)
	var first refresh
	if err := dec.Decode(&first); err != nil { // the first look: no holder yet
		t.Fatal(err)
	}
	holder := r.start("run", "--lifetime", "1m", "--", "/bin/true")
	defer func() { _ = holder.cmd.Process.Kill() }()
	var last refresh
	for end := time.Now().Add(40 * time.Second); last.Jobs.Done < 2 || len(last.Events) == 0; {
		if time.Now().After(end) {
			t.Fatalf("no refresh with both jobs done and an event: %+v", last)
		}
		last = refresh{}
		if err := dec.Decode(&last); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := last.Rates["done"]; !ok || last.Events[0].Kind != "took" || last.Events[0].Slot != "run-0" {
		t.Fatalf("rates %v, events %v", last.Rates, last.Events)
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGINT: %v", err)
	}
}

// TestMetricsFile: a holder with metrics_file rewrites it (atomically, no
// temporary file left) with the queue's metrics while it runs, and once
// more as it leaves.
func TestMetricsFile(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.baton("enqueue", "a", "b")
	path := filepath.Join(r.dir, "baton.prom")
	h := r.start("run", "--lifetime", "1m", "--metrics-file", path, "--", "/bin/true")
	defer func() { _ = h.cmd.Process.Kill() }()
	eventually(t, 20*time.Second, "metrics file with both jobs done", func() bool {
		b, _ := os.ReadFile(path)
		return strings.Contains(string(b), `baton_jobs_done_total{queue="default"} 2`) &&
			strings.Contains(string(b), `baton_slots_held{queue="default",role="run"} 1`)
	})
	// Leaving, the holder writes the file once more with its slot freed, so
	// a file the last holder left does not count it.
	if err := h.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.done:
	case <-time.After(20 * time.Second):
		t.Fatal("holder still running 20s after SIGTERM")
	}
	if code := h.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("holder exit %d after SIGTERM, want 0: %s", code, h.log())
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), `baton_slots_held{queue="default",role="run"} 0`) {
		t.Fatalf("metrics file after the holder left, want no run slot held:\n%s", b)
	}
	ents, _ := os.ReadDir(r.dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".baton.prom.") {
			t.Fatalf("temporary file left: %s", e.Name())
		}
	}
}

// TestFindingTheRightQueue: `baton queues` lists the queues with their jobs;
// status on a queue with no keys says so and names the queues that exist,
// and on jobs waiting with no holder in its lock dir it says where it looked.
func TestFindingTheRightQueue(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	if _, errOut, code := r.baton("enqueue", "--queue", "thumbs", "a", "b"); code != 0 {
		t.Fatalf("enqueue: %s", errOut)
	}
	out, errOut, code := r.baton("queues")
	if code != 0 || !regexp.MustCompile(`(?m)^thumbs +2 +0 +0 +0 +0 +0 +-$`).MatchString(out) {
		t.Fatalf("queues exit %d: %s%s\nwant thumbs with 2 waiting", code, out, errOut)
	}
	out, _, code = r.baton("status", "--queue", "thumb")
	if want := "queue thumb has no keys in this Redis database (a typo?); queues here: thumbs"; code != 0 || !strings.Contains(out, want) {
		t.Fatalf("status on a mistyped queue, exit %d:\n%s\nwant %q", code, out, want)
	}
	out, _, code = r.baton("status", "--queue", "thumbs")
	if want := "2 jobs waiting or pending and no holder in " + r.locks; code != 0 || !strings.Contains(out, want) || strings.Contains(out, "no keys") {
		t.Fatalf("status with jobs and no holder, exit %d:\n%s\nwant %q", code, out, want)
	}
}

// TestMetricsListenGuards: baton metrics --listen on loopback refuses a
// request whose Host is not loopback (421, as baton web does: a DNS name
// pointed at 127.0.0.1 must not read it), and closes connections that
// stall: one kept alive and idle after a scrape, one whose request body
// never comes. Left open, a few hundred of either would hold the server.
func TestMetricsListenGuards(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	_, addr := r.serve("metrics", "--lock-dir", r.locks)
	for host, want := range map[string]int{"evil.example:9187": http.StatusMisdirectedRequest, "localhost:9187": http.StatusOK, addr: http.StatusOK} {
		req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
		req.Host = host
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("Host %s: %d, want %d", host, res.StatusCode, want)
		}
	}
	stalled := map[string]string{
		"idle after a scrape": "GET /metrics HTTP/1.1\r\nHost: " + addr + "\r\n\r\n",
		"body never sent":     "GET /metrics HTTP/1.1\r\nHost: " + addr + "\r\nContent-Length: 100\r\n\r\n",
	}
	errc := make(chan error, len(stalled))
	for name, req := range stalled {
		go func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errc <- err
				return
			}
			defer c.Close()
			if _, err := io.WriteString(c, req); err != nil {
				errc <- err
				return
			}
			// serve.ReadTimeout and IdleTimeout are 30s.
			_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
			start := time.Now()
			if _, err := io.Copy(io.Discard, c); errors.Is(err, os.ErrDeadlineExceeded) {
				errc <- fmt.Errorf("%s: connection still open after %v", name, time.Since(start).Round(time.Second))
				return
			}
			errc <- nil
		}()
	}
	for range stalled {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
}
