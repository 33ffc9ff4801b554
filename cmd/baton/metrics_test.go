package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMetricsListen: baton metrics --listen serves /metrics, reads Redis at
// each scrape (baton_up goes to 0 when Redis stops, and the server stays
// up), and exits 0 on SIGTERM.
func TestMetricsListen(t *testing.T) {
	r := newRig(t)
	r.baton("enqueue", "a", "b", "c")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := r.cmd("metrics", "--lock-dir", r.locks, "--listen", addr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }()
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
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still serving 10s after SIGTERM")
	}
}
