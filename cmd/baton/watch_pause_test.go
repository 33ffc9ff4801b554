package main

import (
	"bufio"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStatusWatchShowsPause: status --watch says PAUSED, who and why on
// the first line of each refresh while the queue is paused, and stops
// saying it once the queue is resumed.
func TestStatusWatchShowsPause(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.baton("enqueue", "a")
	cmd := r.cmd("status", "--watch", "--interval", "200ms")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// Each refresh starts with the line "queue default on ...".
	firsts := make(chan string, 100)
	go func() {
		defer close(firsts)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l := strings.TrimPrefix(sc.Text(), "\033[H\033[2J"); strings.HasPrefix(l, "queue default on ") {
				firsts <- l
			}
		}
	}()
	next := func(what string, ok func(string) bool) string {
		t.Helper()
		for end := time.After(20 * time.Second); ; {
			select {
			case l, open := <-firsts:
				if !open {
					t.Fatalf("status --watch ended before %s", what)
				}
				if ok(l) {
					return l
				}
			case <-end:
				t.Fatalf("no refresh %s within 20s", what)
			}
		}
	}
	next("at all", func(string) bool { return true })
	if _, errOut, code := r.baton("pause", "--reason", "watch me"); code != 0 {
		t.Fatalf("pause: exit %d %s", code, errOut)
	}
	l := next("saying PAUSED", func(l string) bool { return strings.Contains(l, "PAUSED") })
	if !strings.Contains(l, "watch me") || !strings.Contains(l, "paused by ") || !strings.Contains(l, "@") {
		t.Errorf("first line while paused: %q, want who and why", l)
	}
	if _, errOut, code := r.baton("resume"); code != 0 {
		t.Fatalf("resume: exit %d %s", code, errOut)
	}
	next("without PAUSED after resume", func(l string) bool { return !strings.Contains(l, "PAUSED") })
	_ = cmd.Process.Signal(syscall.SIGINT)
}
