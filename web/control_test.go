package web

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/work"
	"github.com/rs/zerolog"
)

// TestControlActions: pause (for, reason), resume and cancel through the
// dashboard, under the rules of requeue and purge: refused with actions
// off, without or with a wrong token, cross-origin; a GET never acts; bad
// forms (a bad id, a negative for) are 400 and change nothing; the page
// shows the pause as status does (who, when, why, until).
func TestControlActions(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	paused := func(q string) *work.Pause {
		t.Helper()
		p, err := work.ReadPause(ctx, f.rdb, q)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	waiting, err := work.Enqueue(ctx, f.rdb, "q", []byte("to cancel"))
	if err != nil {
		t.Fatal(err)
	}
	pauseForm := url.Values{"queue": {"q"}, "for": {"15m"}, "reason": {"db <migration>"}, "token": {token}}
	cancelForm := url.Values{"queue": {"q"}, "id": {waiting}, "token": {token}}

	off := f.server(t, Options{Token: token})
	if code, _, body := post(t, off, "/queue/pause", pauseForm, nil); code != 403 || !strings.Contains(body, "actions are off") {
		t.Errorf("pause with actions off: %d\n%s", code, body)
	}
	if _, _, body := get(t, off, "/"); strings.Contains(body, `action="/queue/pause"`) || strings.Contains(body, `action="/job/cancel"`) {
		t.Error("read-only dashboard shows pause or cancel forms")
	}

	on := f.server(t, Options{Actions: true, Token: token})
	_, _, page := get(t, on, "/")
	for _, want := range []string{`action="/queue/pause"`, `action="/job/cancel"`, `name="for"`, `name="reason"`} {
		if !strings.Contains(page, want) {
			t.Errorf("dashboard with actions lacks %s", want)
		}
	}
	if strings.Contains(page, `id="paused"`) || strings.Contains(page, `action="/queue/resume"`) {
		t.Error("a queue not paused shows a pause, or a resume button")
	}
	refused := []struct {
		name, path string
		form       url.Values
		header     map[string]string
		code       int
		says       string
	}{
		{"pause, no token", "/queue/pause", url.Values{"queue": {"q"}}, nil, 403, "wrong or missing token"},
		{"pause, wrong token", "/queue/pause", url.Values{"queue": {"q"}, "token": {token + "x"}}, nil, 403, "wrong or missing token"},
		{"pause, cross origin", "/queue/pause", pauseForm, map[string]string{"Origin": "http://evil.example"}, 403, "cross-origin"},
		{"pause, cross site", "/queue/pause", pauseForm, map[string]string{"Sec-Fetch-Site": "cross-site"}, 403, "cross-origin"},
		{"pause, unknown queue", "/queue/pause", url.Values{"queue": {"nope"}, "token": {token}}, nil, 404, "no such queue"},
		{"pause, negative for", "/queue/pause", url.Values{"queue": {"q"}, "for": {"-5m"}, "token": {token}}, nil, 400, "not a positive duration"},
		{"pause, zero for", "/queue/pause", url.Values{"queue": {"q"}, "for": {"0s"}, "token": {token}}, nil, 400, "not a positive duration"},
		{"pause, bad for", "/queue/pause", url.Values{"queue": {"q"}, "for": {"soon"}, "token": {token}}, nil, 400, "not a positive duration"},
		{"pause, control bytes", "/queue/pause", url.Values{"queue": {"q"}, "reason": {"a\x1b[2Jb"}, "token": {token}}, nil, 400, "control characters"},
		{"pause, long reason", "/queue/pause", url.Values{"queue": {"q"}, "reason": {strings.Repeat("x", 501)}, "token": {token}}, nil, 400, "at most 500"},
		{"resume, no token", "/queue/resume", url.Values{"queue": {"q"}}, nil, 403, "wrong or missing token"},
		{"cancel, no token", "/job/cancel", url.Values{"queue": {"q"}, "id": {waiting}}, nil, 403, "wrong or missing token"},
		{"cancel, wrong bearer", "/job/cancel", url.Values{"queue": {"q"}, "id": {waiting}}, map[string]string{"Authorization": "Bearer nope"}, 403, "wrong or missing token"},
		{"cancel, cross origin", "/job/cancel", cancelForm, map[string]string{"Origin": "http://evil.example"}, 403, "cross-origin"},
		{"cancel, bad id", "/job/cancel", url.Values{"queue": {"q"}, "id": {"<script>x"}, "token": {token}}, nil, 400, "give one job id"},
		{"cancel, no id", "/job/cancel", url.Values{"queue": {"q"}, "token": {token}}, nil, 400, "give one job id"},
		{"cancel, two ids", "/job/cancel", url.Values{"queue": {"q"}, "id": {waiting, "1-0"}, "token": {token}}, nil, 400, "give one job id"},
		{"cancel, unknown queue", "/job/cancel", url.Values{"queue": {"nope"}, "id": {waiting}, "token": {token}}, nil, 404, "no such queue"},
	}
	for _, r := range refused {
		code, h, body := post(t, on, r.path, r.form, r.header)
		checkSafe(t, h, body)
		if code != r.code || !strings.Contains(body, r.says) {
			t.Errorf("%s: %d, want %d saying %q\n%s", r.name, code, r.code, r.says, body)
		}
	}
	// A GET acts never: 405, and nothing changed.
	for _, path := range []string{"/queue/pause?queue=q&token=" + token, "/queue/resume?queue=q&token=" + token,
		"/job/cancel?queue=q&id=" + waiting + "&token=" + token} {
		if code, _ := getCode(t, on, path); code != 405 {
			t.Errorf("GET %s: %d, want 405", path, code)
		}
	}
	if p := paused("q"); p != nil {
		t.Fatalf("refused actions paused the queue: %+v", p)
	}
	if loc, err := work.Locate(ctx, f.rdb, "q", waiting); err != nil || loc.State != work.StateWaiting {
		t.Fatalf("refused actions moved the job: %+v %v", loc, err)
	}

	// Pause for 15m with a reason: the page says so, as status does.
	code, h, _ := post(t, on, "/queue/pause", pauseForm, map[string]string{"Origin": on.URL})
	if code != 303 || h.Get("Location") != "/?done=paused&queue=q#jobs" {
		t.Fatalf("pause: %d to %q", code, h.Get("Location"))
	}
	p := paused("q")
	if p == nil || p.Reason != "db <migration>" || !strings.HasPrefix(p.User, "web(127.0.0.1)") || p.Until.IsZero() ||
		time.Until(p.Until) < 14*time.Minute || time.Until(p.Until) > 15*time.Minute {
		t.Fatalf("pause written: %+v", p)
	}
	code, h, page = get(t, on, "/?done=paused&queue=q")
	checkSafe(t, h, page)
	for _, want := range []string{`<p class="banner" id="done">queue paused`, `<p class="paused" id="paused">PAUSED by <strong>web(127.0.0.1)@`,
		`<span id="pause-reason">db &lt;migration&gt;</span>`, `(in 1`, `action="/queue/resume"`, "paused by web(127.0.0.1)@"} {
		if code != 200 || !strings.Contains(page, want) {
			t.Errorf("paused queue's page (%d) lacks %q", code, want)
		}
	}
	if strings.Contains(page, `action="/queue/pause"`) {
		t.Error("a paused queue shows the pause form")
	}
	// A pause without for lasts until resumed; a read-only page shows it too.
	if code, _, _ := post(t, on, "/queue/pause", url.Values{"queue": {"q"}, "token": {token}}, nil); code != 303 {
		t.Fatalf("pause without for: %d", code)
	}
	if p := paused("q"); p == nil || !p.Until.IsZero() || p.Reason != "" {
		t.Fatalf("pause without for: %+v", p)
	}
	if _, _, body := get(t, off, "/"); !strings.Contains(body, `id="paused"`) || !strings.Contains(body, "until resumed") {
		t.Errorf("read-only page does not show the pause\n%s", body)
	}

	// Resume, then resume again: the queue was not paused.
	code, h, _ = post(t, on, "/queue/resume", url.Values{"queue": {"q"}}, map[string]string{"Authorization": "Bearer " + token})
	if code != 303 || h.Get("Location") != "/?done=resumed&queue=q#jobs" || paused("q") != nil {
		t.Fatalf("resume: %d to %q, paused %+v", code, h.Get("Location"), paused("q"))
	}
	if code, h, _ = post(t, on, "/queue/resume", url.Values{"queue": {"q"}, "token": {token}}, nil); code != 303 || !strings.Contains(h.Get("Location"), "done=not-paused") {
		t.Errorf("resume of a queue not paused: %d to %q", code, h.Get("Location"))
	}

	// The job page offers a cancel; cancel dead-letters the waiting job.
	if _, _, body := get(t, on, "/job?queue=q&id="+waiting); !strings.Contains(body, `id="cancel-job"`) {
		t.Error("a waiting job's page has no cancel form")
	}
	cancelForm.Set("reason", "wrong input")
	code, h, _ = post(t, on, "/job/cancel", cancelForm, nil)
	if code != 303 || h.Get("Location") != "/job?done=cancelled&id="+url.QueryEscape(waiting)+"&queue=q" {
		t.Fatalf("cancel: %d to %q", code, h.Get("Location"))
	}
	d, err := work.GetDead(ctx, f.rdb, "q", waiting)
	if err != nil || d.Reason != work.ReasonCancelled || !strings.Contains(d.Error, "cancelled by web(127.0.0.1)@") || !strings.Contains(d.Error, "wrong input") {
		t.Fatalf("cancelled job's letter: %+v %v", d, err)
	}
	_, _, body := get(t, on, h.Get("Location"))
	if !strings.Contains(body, `id="done">job cancelled`) || !strings.Contains(body, "state-dead") || strings.Contains(body, `id="cancel-job"`) {
		t.Errorf("job page after the cancel\n%s", body)
	}
	// A dead job, an unknown one, another queue's (enqueued now: ids are
	// per queue, and the fixture's could equal one of q's): 409, nothing done.
	other, err := work.Enqueue(ctx, f.rdb, "other", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ q, id, says string }{
		{"q", waiting, "it is dead"},
		{"q", "1-0", "unknown on queue q"},
		{"q", other, "unknown on queue q"},
	} {
		code, h, body := post(t, on, "/job/cancel", url.Values{"queue": {c.q}, "id": {c.id}, "token": {token}}, nil)
		checkSafe(t, h, body)
		if code != 409 || !strings.Contains(body, c.says) {
			t.Errorf("cancel %s of %s: %d, want 409 saying %q\n%s", c.id, c.q, code, c.says, body)
		}
	}
	if loc, err := work.Locate(ctx, f.rdb, "other", other); err != nil || loc.State != work.StateWaiting {
		t.Errorf("another queue's job after a cancel on q: %+v %v", loc, err)
	}
	// A running job: the request is written, its holder stops it.
	running, err := work.Enqueue(ctx, f.rdb, "run", []byte("runs"))
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	h2 := work.HandlerFunc(func(ctx context.Context, j *work.Job) error {
		close(started)
		<-ctx.Done()
		return context.Cause(ctx)
	})
	rctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		errc <- work.Run(rctx, work.Config{Client: f.rdb, Queue: "run", Consumer: "testhost/run-0", Handler: h2,
			MaxAttempts: 3, Grace: time.Second, Logger: zerolog.Nop()}, new(work.Stats))
	}()
	defer func() { stop(); <-errc }()
	<-started
	code, h, _ = post(t, on, "/job/cancel", url.Values{"queue": {"run"}, "id": {running}, "token": {token}}, nil)
	if code != 303 || !strings.Contains(h.Get("Location"), "done=requested") {
		t.Fatalf("cancel of a running job: %d to %q", code, h.Get("Location"))
	}
	if _, _, body := get(t, on, h.Get("Location")); !strings.Contains(body, `id="done">cancel requested`) {
		t.Errorf("job page after a cancel request\n%s", body)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if d, err := work.GetDead(ctx, f.rdb, "run", running); err == nil && d.Reason == work.ReasonCancelled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the running job was not dead-lettered as cancelled within 20s")
		}
	}
	log := f.logBuf.String()
	for _, want := range []string{`"action":"pause"`, `"message":"web: paused the queue"`, `"action":"resume"`, `"action":"cancel"`,
		`"outcome":"cancelled"`, `"job":"` + waiting, `"reason":"wrong or missing token"`} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s", want)
		}
	}
	if strings.Contains(log, token) {
		t.Error("the log holds the token")
	}
}
