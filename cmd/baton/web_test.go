package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// hostilePayload would mark the page if any of it ran as script.
const hostilePayload = `<script>document.body.setAttribute("data-pwned","script")</script>` +
	`<img src=x onerror="document.body.setAttribute('data-pwned','img')">`

// webRig is a Redis with a holder that has worked a queue (jobs done, a
// dead letter with a hostile payload) and a baton web serving it.
type webRig struct {
	*rig
	url    string // the dashboard's base URL
	web    *process
	holder *process
	deadID string
}

func newWebRig(t *testing.T, actions bool) *webRig {
	r := newRig(t)
	job := r.script("job.sh", `p=$(cat); case "$p" in *script*) echo "refused: $p" >&2; exit 1;; esac; exit 0`)
	// The holder's first sample of the totals (it takes one at start, then
	// one a minute) comes before the jobs, so the last hour holds them all.
	holder := r.start("run", "--queue", "q", "--slots", "2", "--standby-slots", "1", "--max-attempts", "1", "--lifetime", "1m", "--", job)
	rdb := r.redis.Client()
	for deadline := time.Now().Add(10 * time.Second); rdb.LLen(context.Background(), "baton:{q}:stats:minutes").Val() == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the holder appended no sample of the totals in 10s\n%s", holder.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := range 20 {
		if _, errOut, code := r.baton("enqueue", "--queue", "q", fmt.Sprintf("job-%d", i)); code != 0 {
			t.Fatalf("enqueue: %s", errOut)
		}
	}
	out, errOut, code := r.baton("enqueue", "--queue", "q", hostilePayload)
	if code != 0 {
		t.Fatalf("enqueue: %s", errOut)
	}
	w := &webRig{rig: r, deadID: strings.TrimSpace(out), holder: holder}
	for deadline := time.Now().Add(20 * time.Second); ; {
		out, _, _ := r.baton("queues", "--json")
		if strings.Contains(out, `"done": 20`) && strings.Contains(out, `"dead": 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the holder did not work the queue in 20s: %s\n%s", out, w.holder.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	args := []string{"web", "--queue", "q", "--lock-dir", r.locks, "--slots", "2", "--standby-slots", "1"}
	if actions {
		args = append(args, "--allow-actions")
		r.extraEnv = append(r.extraEnv, "BATON_WEB_TOKEN=a-token-of-24-bytes-here")
	}
	var addr string
	w.web, addr = r.serve(args...)
	w.url = "http://" + addr
	for deadline := time.Now().Add(10 * time.Second); ; {
		if res, err := http.Get(w.url + "/static/app.css"); err == nil {
			res.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("baton web not serving in 10s\n%s", w.web.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return w
}

// TestWebHTTP: the real binary serves the dashboard of a queue a real
// holder worked: slots, counts, and the hostile payload as text, with the
// security headers; an action is refused without the token and done with
// it, and logged.
func TestWebHTTP(t *testing.T) {
	t.Parallel()
	w := newWebRig(t, true)
	res, err := http.Get(w.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	body := string(b)
	if res.StatusCode != 200 || !strings.Contains(res.Header.Get("Content-Security-Policy"), "script-src 'self'") ||
		res.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("GET /: %d %v", res.StatusCode, res.Header)
	}
	pid := fmt.Sprint(w.holder.cmd.Process.Pid)
	for _, want := range []string{`id="count-done">20<`, `20 jobs done, 1 failed runs; mean handler time`, `id="count-dead">1<`, "<td>" + pid + "</td>", "&lt;script&gt;document.body"} {
		if !strings.Contains(body, want) {
			t.Errorf("GET / lacks %q", want)
		}
	}
	if strings.Contains(body, "<script>document") || strings.Contains(body, "<img src=x") {
		t.Error("the hostile payload is markup on the page")
	}
	form := url.Values{"queue": {"q"}, "id": {w.deadID}, "token": {"a-wrong-token-of-24-bytes"}}
	if res, err = http.PostForm(w.url+"/dead/requeue", form); err != nil || res.StatusCode != 403 {
		t.Fatalf("requeue with a wrong token: %v %v", res.StatusCode, err)
	}
	res.Body.Close()
	form.Set("token", "a-token-of-24-bytes-here")
	if res, err = noRedirect.PostForm(w.url+"/dead/requeue", form); err != nil || res.StatusCode != 303 {
		t.Fatalf("requeue: %v %v", res.StatusCode, err)
	}
	res.Body.Close()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(w.web.log(), `"message":"web: requeued a dead letter"`); {
		if time.Now().After(deadline) {
			t.Fatalf("no log line for the requeue:\n%s", w.web.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	log := w.web.log()
	if !strings.Contains(log, `"reason":"wrong or missing token"`) || strings.Contains(log, "a-token-of-24-bytes-here") {
		t.Errorf("web log:\n%s", log)
	}
	for _, line := range strings.Split(log, "\n") {
		if strings.Count(line, `"queue":`) > 1 { // JSON readers disagree on which one wins
			t.Errorf("a log line names its queue twice: %s", line)
		}
	}
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
