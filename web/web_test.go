package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/history"
	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/internal/proc"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/periodic"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// Payloads that must reach the page as text, never as markup.
const (
	hostile = `<script>alert("pwned")</script><img src=x onerror=alert(1)>`
	binary  = "\x00\xff\xfe<script>x</script>\x1b[2J"
	token   = "correct-horse-battery-staple"
)

// fixture is a real Redis with a queue q that a real work.Run has worked
// (8 jobs done, 2 dead letters with hostile payloads), a queue "other" with
// one waiting job, and a held run slot with its record.
type fixture struct {
	rdb    *redis.Client
	cfg    *config.Config
	dead   map[string]string // payload → job id
	other  string            // the waiting job of queue other
	logBuf *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func newFixture(tb testing.TB) *fixture {
	tb.Helper()
	ctx := context.Background()
	srv := redistest.Start(tb)
	f := &fixture{rdb: srv.Client(), dead: map[string]string{}, logBuf: new(syncBuffer)}
	cfg := config.Default()
	cfg.Queue, cfg.LockDir, cfg.Slots, cfg.StandbySlots, cfg.MinSlots = "q", tb.TempDir(), 2, 1, 2
	cfg.RedisURL = "redis://:secretpw@" + srv.Addr + "/0" // shown redacted, never used to connect
	f.cfg = &cfg
	if _, err := work.SampleStats(ctx, f.rdb, "q"); err != nil { // the minute's sample, before any job
		tb.Fatal(err)
	}
	for i := range 8 {
		if _, err := work.Enqueue(ctx, f.rdb, "q", []byte("ok-"+string(rune('a'+i)))); err != nil {
			tb.Fatal(err)
		}
	}
	for _, p := range []string{hostile, binary} {
		id, err := work.Enqueue(ctx, f.rdb, "q", []byte(p))
		if err != nil {
			tb.Fatal(err)
		}
		f.dead[p] = id
	}
	var err error
	if f.other, err = work.Enqueue(ctx, f.rdb, "other", []byte("waits")); err != nil {
		tb.Fatal(err)
	}
	st := new(work.Stats)
	h := work.HandlerFunc(func(ctx context.Context, j *work.Job) error {
		if strings.HasPrefix(string(j.Payload), "ok-") {
			time.Sleep(2 * time.Millisecond)
			return nil
		}
		return errors.New("it failed: <b>bold</b> " + string(j.Payload))
	})
	rctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		errc <- work.Run(rctx, work.Config{Client: f.rdb, Queue: "q", Consumer: "testhost/run-0", Handler: h,
			MaxAttempts: 1, Grace: time.Second, Logger: zerolog.Nop()}, st)
	}()
	for deadline := time.Now().Add(20 * time.Second); st.Done.Load() < 8 || st.Dead.Load() < 2; {
		if time.Now().After(deadline) {
			tb.Fatalf("the holder settled %d done, %d dead in 20s", st.Done.Load(), st.Dead.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		tb.Fatal(err)
	}
	run, err := lock.NewFileSet(cfg.LockDir, "q", lock.RoleRun, 2)
	if err != nil {
		tb.Fatal(err)
	}
	slot, ok, err := run.TryAcquire()
	if !ok || err != nil {
		tb.Fatalf("take a run slot: %v %v", ok, err)
	}
	tb.Cleanup(func() { _ = slot.Release() })
	now := time.Now()
	start, _ := proc.StartTime(os.Getpid())
	if err := slot.Publish(lock.Record{PID: os.Getpid(), Start: start, Host: "testhost", Role: lock.RoleRun, Since: now.Add(-time.Minute),
		Until: now.Add(4 * time.Minute), Activity: json.RawMessage(`{"jobs_done":8}`)}); err != nil {
		tb.Fatal(err)
	}
	// The slot's history: taken, one of k=2 held since.
	hr := &history.Recorder{Client: f.rdb, Queue: "q", Keep: 2, Run: run, PID: os.Getpid(), Host: "testhost"}
	if _, _, err := hr.Took(ctx, slot.Index(), history.ByCandidate, nil, -1); err != nil {
		tb.Fatal(err)
	}
	return f
}

func (f *fixture) server(tb testing.TB, o Options) *httptest.Server {
	tb.Helper()
	o.Config, o.Redis = f.cfg, f.rdb
	o.Log = zerolog.New(f.logBuf)
	h, err := New(o)
	if err != nil {
		tb.Fatal(err)
	}
	ts := httptest.NewServer(h)
	tb.Cleanup(ts.Close)
	return ts
}

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func get(tb testing.TB, ts *httptest.Server, path string) (int, http.Header, string) {
	tb.Helper()
	res, err := noRedirect.Get(ts.URL + path)
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

func post(tb testing.TB, ts *httptest.Server, path string, form url.Values, header map[string]string) (int, http.Header, string) {
	tb.Helper()
	req, _ := http.NewRequest("POST", ts.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := noRedirect.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

// checkSafe: the security headers are there, no payload is markup, the
// Redis password is nowhere.
func checkSafe(tb testing.TB, h http.Header, body string) {
	tb.Helper()
	if h.Get("Content-Security-Policy") != CSP || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" {
		tb.Errorf("security headers: %v", h)
	}
	for _, bad := range []string{"<script>alert", "<img src=x", "<b>bold", "secretpw", "\x1b", "\x00"} {
		if strings.Contains(body, bad) {
			tb.Errorf("page holds %q", bad)
		}
	}
	if n := strings.Count(body, "<script"); n > 1 || n == 1 && !strings.Contains(body, `<script src="/static/app.js" defer></script>`) {
		tb.Errorf("page has %d script elements other than app.js", n)
	}
	if strings.Contains(body, " style=") {
		tb.Error("page has inline style attributes")
	}
}

func TestDashboardPage(t *testing.T) {
	f := newFixture(t)
	ts := f.server(t, Options{})
	code, h, body := get(t, ts, "/")
	if code != 200 {
		t.Fatalf("GET /: %d\n%s", code, body)
	}
	checkSafe(t, h, body)
	for _, want := range []string{
		`id="count-done">8<`, `id="count-dead">2<`, `id="count-waiting">0<`,
		`<code id="redis-url">redis://:xxxxx@`, // redacted
		"run-0", "run-1", "standby-0", ">testhost<", ">held<", ">free<", "1 of 2 run slots held",
		`8 jobs done, 2 failed runs; mean handler time`,
		`&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;`, // the preview, escaped
		`it failed: &lt;b&gt;bold&lt;/b&gt;`,
		`\x00\xff\xfe&lt;script&gt;x&lt;/script&gt;\x1b[2J`, // binary, quoted
		`href="/?queue=other"`, `<span class="n" id="count-done">`,
		"read-only",
		`id="slot-events"`, "pid " + strconv.Itoa(os.Getpid()) + " on testhost took the slot",
		`id="coverage">time with fewer than k=2 run slots held, all time: `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("GET / lacks %q", want)
		}
	}
	if strings.Contains(body, `action="/dead/requeue"`) {
		t.Error("read-only dashboard shows action forms")
	}
	if strings.Count(body, "<rect class=\"done\"") != chartMinutes {
		t.Errorf("throughput chart: %d bars, want %d", strings.Count(body, "<rect class=\"done\""), chartMinutes)
	}
}

func TestQueueParam(t *testing.T) {
	f := newFixture(t)
	ts := f.server(t, Options{})
	code, h, body := get(t, ts, "/?queue=other")
	checkSafe(t, h, body)
	if code != 200 || !strings.Contains(body, `id="count-waiting">1<`) || !strings.Contains(body, `<strong id="queue-name">other</strong>`) {
		t.Errorf("GET /?queue=other: %d\n%s", code, body)
	}
	for _, q := range []string{"nope", "../../etc/passwd", "<script>"} {
		code, h, body := get(t, ts, "/?queue="+url.QueryEscape(q))
		checkSafe(t, h, body)
		if code != 404 || !strings.Contains(body, "no such queue") {
			t.Errorf("GET /?queue=%s: %d, want 404 saying no such queue\n%s", q, code, body)
		}
	}
}

func TestJobPage(t *testing.T) {
	f := newFixture(t)
	ts := f.server(t, Options{})
	// a job done 90s ago, remembered by a retention
	at := time.Now().Add(-90 * time.Second).UnixMilli()
	f.rdb.ZAdd(context.Background(), work.KeysFor("q").Done, redis.Z{Score: float64(at), Member: "5-0"})
	for _, c := range []struct {
		path, want string
		code       int
	}{
		{"/job?queue=other&id=" + f.other, `id="job-state" class="state state-waiting">waiting<`, 200},
		{"/job?queue=q&id=" + f.dead[hostile], `<a href="/dead?queue=q&amp;id=` + f.dead[hostile] + `">show it</a>`, 200},
		{"/job?queue=q&id=1-0", ">unknown<", 200},
		{"/job?queue=q&id=5-0", `id="job-state" class="state state-done">done<`, 200},
		{"/job?queue=q&id=5-0", "(1m3", 200}, // 1m30s ago, or a little more on a slow machine
		{"/job?queue=q&id=" + url.QueryEscape("<script>x"), `&#34;&lt;script&gt;x&#34; is not a job id`, 400},
		{"/job?queue=q&id=", "give a job id", 400},
		{"/job?queue=nope&id=1-0", "no such queue", 404},
	} {
		code, h, body := get(t, ts, c.path)
		checkSafe(t, h, body)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("GET %s: %d, want %d with %q\n%s", c.path, code, c.code, c.want, body)
		}
	}
}

func TestDeadLetterPage(t *testing.T) {
	f := newFixture(t)
	ts := f.server(t, Options{})
	code, h, body := get(t, ts, "/dead?queue=q&id="+f.dead[hostile])
	checkSafe(t, h, body)
	if code != 200 || !strings.Contains(body, `<pre id="payload">&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;</pre>`) ||
		!strings.Contains(body, `<dd id="reason">failed</dd>`) {
		t.Errorf("hostile dead letter: %d\n%s", code, body)
	}
	code, h, body = get(t, ts, "/dead?queue=q&id="+f.dead[binary])
	checkSafe(t, h, body)
	if code != 200 || !strings.Contains(body, "not UTF-8 text: hex") || !strings.Contains(body, "00 ff fe 3c 73 63 72 69") {
		t.Errorf("binary dead letter: %d\n%s", code, body)
	}
	if code, _, body := get(t, ts, "/dead?queue=q&id=1-0"); code != 404 || !strings.Contains(body, "no such dead letter") {
		t.Errorf("missing dead letter: %d\n%s", code, body)
	}
}

func TestStaticAndHost(t *testing.T) {
	f := newFixture(t)
	ts := f.server(t, Options{})
	for path, ctype := range map[string]string{"/static/app.js": "text/javascript", "/static/app.css": "text/css"} {
		code, h, body := get(t, ts, path)
		if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), ctype) || h.Get("Content-Security-Policy") != CSP || len(body) < 100 {
			t.Errorf("GET %s: %d %v", path, code, h)
		}
	}
	if code, _, _ := get(t, ts, "/nothing"); code != 404 {
		t.Errorf("GET /nothing: %d", code)
	}
	// DNS rebinding: a name that points at 127.0.0.1 is not served.
	req, _ := http.NewRequest("GET", ts.URL+"/", nil)
	req.Host = "evil.example:8080"
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("Host evil.example: %d, want 421", res.StatusCode)
	}
	ts2 := f.server(t, Options{AnyHost: true})
	req, _ = http.NewRequest("GET", ts2.URL+"/", nil)
	req.Host = "dash.example"
	if res, err = http.DefaultClient.Do(req); err != nil || res.StatusCode != 200 {
		t.Errorf("AnyHost, Host dash.example: %v %v", res.StatusCode, err)
	}
	res.Body.Close()
	for hp, want := range map[string]bool{"127.0.0.1:1": true, "[::1]:80": true, "localhost": true, "127.9.9.9": true,
		"0.0.0.0:80": false, ":8080": false, "10.0.0.1:80": false, "localhost.evil.example": false} {
		if LoopbackHost(hp) != want {
			t.Errorf("LoopbackHost(%q) = %v", hp, !want)
		}
	}
}

func TestActions(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	deadCount := func() int64 { return f.rdb.XLen(ctx, work.KeysFor("q").Dead).Val() }
	one := url.Values{"queue": {"q"}, "id": {f.dead[hostile]}, "token": {token}}

	if _, err := New(Options{Config: f.cfg, Redis: f.rdb, Actions: true, Token: "short"}); !errors.Is(err, ErrShortToken) {
		t.Errorf("New with a short token: %v", err)
	}
	off := f.server(t, Options{Token: token})
	if code, _, body := post(t, off, "/dead/requeue", one, nil); code != 403 || !strings.Contains(body, "actions are off") {
		t.Errorf("requeue with actions off: %d\n%s", code, body)
	}
	on := f.server(t, Options{Actions: true, Token: token})
	_, _, page := get(t, on, "/")
	if !strings.Contains(page, `action="/dead/requeue"`) || !strings.Contains(page, `action="/dead/purge"`) {
		t.Error("dashboard with actions shows no action forms")
	}
	refused := []struct {
		name   string
		form   url.Values
		header map[string]string
		code   int
	}{
		{"no token", url.Values{"queue": {"q"}, "id": {f.dead[hostile]}}, nil, 403},
		{"wrong token", url.Values{"queue": {"q"}, "id": {f.dead[hostile]}, "token": {token + "x"}}, nil, 403},
		{"wrong bearer", url.Values{"queue": {"q"}, "id": {f.dead[hostile]}}, map[string]string{"Authorization": "Bearer nope"}, 403},
		{"cross origin", one, map[string]string{"Origin": "http://evil.example"}, 403},
		{"cross site", one, map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"unknown queue", url.Values{"queue": {"nope"}, "id": {"1-0"}, "token": {token}}, nil, 404},
		{"ids and all", url.Values{"queue": {"q"}, "id": {"1-0"}, "all": {"1"}, "token": {token}}, nil, 400},
		{"neither", url.Values{"queue": {"q"}, "token": {token}}, nil, 400},
	}
	for _, r := range refused {
		for _, path := range []string{"/dead/requeue", "/dead/purge"} {
			code, h, body := post(t, on, path, r.form, r.header)
			checkSafe(t, h, body)
			if code != r.code {
				t.Errorf("%s %s: %d, want %d\n%s", path, r.name, code, r.code, body)
			}
		}
	}
	if n := deadCount(); n != 2 {
		t.Fatalf("refused actions changed the dead letters: %d left", n)
	}
	if code, _ := getCode(t, on, "/dead/requeue"); code != 405 {
		t.Errorf("GET /dead/requeue: %d, want 405", code)
	}

	code, h, _ := post(t, on, "/dead/requeue", one, map[string]string{"Origin": on.URL})
	if code != 303 || h.Get("Location") != "/?done=requeued&n=1&queue=q#dead" {
		t.Fatalf("requeue: %d to %q", code, h.Get("Location"))
	}
	if loc, err := work.Locate(ctx, f.rdb, "q", f.dead[hostile]); err != nil || loc.State != work.StateWaiting || deadCount() != 1 {
		t.Fatalf("after requeue: %+v %v, %d dead", loc, err, deadCount())
	}
	if _, _, body := get(t, on, "/?done=requeued&n=1&queue=q"); !strings.Contains(body, `<p class="banner" id="done">requeued 1 dead letters</p>`) {
		t.Error("no banner after requeue")
	}
	if code, _, body := post(t, on, "/dead/requeue", one, nil); code != 404 || !strings.Contains(body, "no such dead letter") {
		t.Errorf("requeue twice: %d\n%s", code, body)
	}
	code, h, _ = post(t, on, "/dead/purge", url.Values{"queue": {"q"}, "all": {"1"}}, map[string]string{"Authorization": "Bearer " + token})
	if code != 303 || !strings.Contains(h.Get("Location"), "done=purged&n=1") || deadCount() != 0 {
		t.Fatalf("purge all: %d to %q, %d dead left", code, h.Get("Location"), deadCount())
	}
	log := f.logBuf.String()
	for _, want := range []string{`"action":"requeue"`, `"message":"web: requeued a dead letter"`, `"job":"` + f.dead[hostile],
		`"action":"purge"`, `"purged":1`, `"reason":"wrong or missing token"`, `"reason":"actions are off`, `"reason":"cross-origin request refused"`} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s", want)
		}
	}
	if strings.Contains(log, token) {
		t.Error("the log holds the token")
	}
}

func getCode(tb testing.TB, ts *httptest.Server, path string) (int, string) {
	code, _, body := get(tb, ts, path)
	return code, body
}

// TestRedisDown: a page says Redis is unreachable, by its redacted URL.
func TestRedisDown(t *testing.T) {
	cfg := config.Default()
	cfg.Queue, cfg.LockDir, cfg.RedisURL = "q", t.TempDir(), "redis://:secretpw@127.0.0.1:1/0"
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	defer rdb.Close()
	h, err := New(Options{Config: &cfg, Redis: rdb, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	defer ts.Close()
	code, hd, body := get(t, ts, "/")
	checkSafe(t, hd, body)
	if code != 502 || !strings.Contains(body, "redis at redis://:xxxxx@127.0.0.1:1/0") {
		t.Errorf("redis down: %d\n%s", code, body)
	}
}

// The config's periodic entries, with what Redis recorded of them; not on
// another queue's page.
func TestDashboardPeriodic(t *testing.T) {
	f := newFixture(t)
	f.cfg.Periodic = []config.PeriodicEntry{{Name: "nightly", Schedule: "CRON_TZ=Europe/Berlin 30 2 * * *", Overlap: "skip"}}
	ctx := context.Background()
	if err := f.rdb.HSet(ctx, periodic.RecordsKey("q"), "nightly", time.Now().Add(-time.Hour).UnixMilli(), "nightly:job", "1700000000000-0",
		"nightly:count:skipped", 3).Err(); err != nil {
		t.Fatal(err)
	}
	ts := f.server(t, Options{})
	code, h, body := get(t, ts, "/")
	checkSafe(t, h, body)
	for _, want := range []string{`id="periodic-entries"`, "<td>nightly</td>", "<code>CRON_TZ=Europe/Berlin 30 2 * * *</code>", "<td>Europe/Berlin</td>",
		`href="/job?queue=q&amp;id=1700000000000-0"`, `<td class="num">3</td>`} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("GET / (%d) lacks %q", code, want)
		}
	}
	if _, _, body := get(t, ts, "/?queue=other"); strings.Contains(body, "periodic-entries") {
		t.Error("another queue's page shows the config's periodic entries")
	}
}

// Open batches show with a progress bar; complete ones do not.
func TestDashboardOpenBatches(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	b, err := work.NewBatch(ctx, f.rdb, "q", work.BatchName("album-7"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Add(ctx, work.Message{Payload: []byte("1")}, work.Message{Payload: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	done, _ := work.NewBatch(ctx, f.rdb, "q", work.BatchName("finished"))
	if err := done.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ts := f.server(t, Options{})
	code, h, body := get(t, ts, "/")
	checkSafe(t, h, body)
	for _, want := range []string{`id="open-batches"`, "<code>" + b.ID() + "</code>", "<td>album-7</td>", `<progress max="100" value="0">`} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("GET / (%d) lacks %q", code, want)
		}
	}
	if strings.Contains(body, "finished") {
		t.Error("a complete batch is shown as open")
	}
}

// The busiest keys and the keys at their cap show as status shows them
// (work.ReadKeys): a real holder runs one job of each key, capped at 1, and
// the rest wait; a key is text on the page, never markup.
func TestDashboardKeys(t *testing.T) {
	f := newFixture(t)
	f.cfg.KeyConcurrency = 1
	ctx := context.Background()
	const hostileKey = `<i>tenant</i>`
	for k, n := range map[string]int{"tenant-1": 3, hostileKey: 5} {
		for range n {
			if _, err := work.Enqueue(ctx, f.rdb, "q", []byte("k"), work.Key(k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var running sync.WaitGroup
	running.Add(2)
	release := make(chan struct{})
	h := work.HandlerFunc(func(ctx context.Context, j *work.Job) error {
		running.Done()
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	rctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		errc <- work.Run(rctx, work.Config{Client: f.rdb, Queue: "q", Consumer: "testhost/run-1", Handler: h, Concurrency: 4,
			KeyCaps: work.KeyCaps{Default: 1}, Grace: time.Second, Logger: zerolog.Nop()}, nil)
	}()
	defer func() { close(release); cancel(); <-errc }()
	running.Wait() // one job of each key runs; its key is at its cap
	ts := f.server(t, Options{})
	code, hdr, body := get(t, ts, "/")
	checkSafe(t, hdr, body)
	esc := "&lt;i&gt;tenant&lt;/i&gt;"
	for _, want := range []string{`id="busiest-keys"`, "2 with jobs: 6 waiting, 2 running",
		`<tr class="at-cap"><td><code>` + esc + `</code></td><td class="num">4</td><td class="num">1</td><td>at cap 1</td></tr>`,
		`<tr class="at-cap"><td><code>tenant-1</code></td><td class="num">2</td><td class="num">1</td><td>at cap 1</td></tr>`,
		`id="keys-at-cap">2 at their cap: <code>` + esc + `</code>, <code>tenant-1</code>`} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("GET / (%d) lacks %q", code, want)
		}
	}
	if strings.Contains(body, hostileKey) {
		t.Error("a key reached the page as markup")
	}
	if _, _, body := get(t, ts, "/?queue=other"); strings.Contains(body, "busiest-keys") {
		t.Error("a queue without keys shows keys")
	}
}
