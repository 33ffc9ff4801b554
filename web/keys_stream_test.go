package web

import (
	"context"
	"strings"
	"testing"

	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

// A job in its key's stream (laid out by hand as docs/keys.md says) shows
// its key and the key's counts on its page, and the queue's page lists
// the key among the busiest, the key as text.
func TestJobPageKeyStream(t *testing.T) {
	f := newFixture(t)
	ts := f.server(t, Options{})
	ctx := context.Background()
	k := work.KeysFor("other")
	key := "<b>tenant"
	s := k.KeyStream(work.PriorityHigh, key)
	f.rdb.XGroupCreateMkStream(ctx, s, work.Group, "0")
	for _, id := range []string{"1700000000000-1", "1700000000000-2"} {
		f.rdb.XAdd(ctx, &redis.XAddArgs{Stream: s, ID: id, Values: []any{work.PayloadField, "x", "key", key, "priority", "high", "orig", id}})
		f.rdb.HSet(ctx, k.KeyJobs(), id, id+"\nhigh\n"+key)
	}
	f.rdb.SAdd(ctx, k.KeyStreams(), s)
	f.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: work.Group, Consumer: "h/run-1", Streams: []string{s, ">"}, Count: 1})
	for id, want := range map[string]string{
		"1700000000000-1": `class="state state-running">running<`,
		"1700000000000-2": `class="state state-waiting">waiting<`,
	} {
		code, h, body := get(t, ts, "/job?queue=other&id="+id)
		checkSafe(t, h, body)
		if code != 200 || !strings.Contains(body, want) ||
			!strings.Contains(body, `<dd id="job-key"><code>&lt;b&gt;tenant</code>: 1 waiting in its stream (high), 1 running</dd>`) {
			t.Errorf("job %s: %d, want %q and its key\n%s", id, code, want, body)
		}
	}
	code, h, body := get(t, ts, "/?queue=other")
	checkSafe(t, h, body)
	if code != 200 || !strings.Contains(body, "1 with jobs: 1 waiting, 1 running") || !strings.Contains(body, "<td><code>&lt;b&gt;tenant</code></td>") {
		t.Errorf("queue page: %d, want the key among the busiest\n%s", code, body)
	}
}
