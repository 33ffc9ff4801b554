package web

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

// A done job's page shows its result escaped and cut for display, with a
// link that serves it raw as a download; a running job's page shows its
// progress, escaped.
func TestJobResultAndProgressPages(t *testing.T) {
	f := newFixture(t)
	ts := f.server(t, Options{})
	ctx := context.Background()
	k := work.KeysFor("q")
	now := float64(time.Now().UnixMilli())
	f.rdb.ZAdd(ctx, k.Done, redis.Z{Score: now, Member: "6-0"}, redis.Z{Score: now, Member: "7-0"})
	hostileResult := "<script>alert(1)</script>\x01 done"
	big := strings.Repeat("é", 3000) // 6000 bytes
	f.rdb.HSet(ctx, k.Results, "6-0", hostileResult, "7-0", big)

	code, h, body := get(t, ts, "/job?queue=q&id=6-0")
	checkSafe(t, h, body)
	if code != 200 || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") || strings.Contains(body, "<script>alert") ||
		!strings.Contains(body, `href="/job/result?queue=q&amp;id=6-0"`) {
		t.Errorf("job page of a result: %d\n%s", code, body)
	}
	_, _, body = get(t, ts, "/job?queue=q&id=7-0")
	if !strings.Contains(body, "6000 bytes, the first 4096 shown") {
		t.Errorf("a large result is not cut for display:\n%s", body)
	}
	code, h, body = get(t, ts, "/job/result?queue=q&id=6-0")
	if code != 200 || body != hostileResult || h.Get("Content-Type") != "application/octet-stream" || !strings.HasPrefix(h.Get("Content-Disposition"), "attachment") {
		t.Errorf("raw result: %d %v %q", code, h, body)
	}
	if code, _, _ := get(t, ts, "/job/result?queue=q&id=1-0"); code != 404 {
		t.Errorf("raw result of an unknown job: %d, want 404", code)
	}

	// the waiting job of queue other, delivered: running, with progress
	ok := work.KeysFor("other")
	if err := work.Prepare(ctx, f.rdb, ok); err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: work.Group, Consumer: "h/run-0", Streams: []string{ok.Stream, ">"}}).Err(); err != nil {
		t.Fatal(err)
	}
	f.rdb.HSet(ctx, ok.Progress, f.other, `{"pct":42,"msg":"<b>resizing</b>"}`)
	_, _, body = get(t, ts, "/job?queue=other&id="+f.other)
	if !strings.Contains(body, `<progress max="100" value="42">`) || !strings.Contains(body, "&lt;b&gt;resizing") {
		t.Errorf("running job's progress:\n%s", body)
	}
}
