package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/work"
)

// baton job says where a keyed job is: waiting in its key's stream, for
// its key's cap or its turn, or running as any running job, with its
// key's counts.
func TestDescribeKeyed(t *testing.T) {
	cfg := &config.Config{KeyConcurrency: 5, KeyLimits: map[string]int{"customer-7": 1}}
	for _, tc := range []struct {
		loc  work.Location
		want string
	}{
		{work.Location{ID: "1-1", State: work.StateWaiting, Key: "customer-42", KeyWaiting: 1000, KeyRunning: 5, Ahead: 12},
			"job 1-1: waiting in key customer-42's stream (1000 waiting, 5 running, 12 ahead of it): waits for its key's cap (key_concurrency 5)"},
		{work.Location{ID: "1-2", State: work.StateWaiting, Key: "customer-9", Priority: "high", KeyWaiting: 10, KeyRunning: 4},
			"job 1-2: waiting at high priority in key customer-9's stream (10 waiting, 4 running, 0 ahead of it): waits for its key's turn"},
		{work.Location{ID: "1-3", State: work.StateWaiting, Key: "customer-7", KeyWaiting: 3, KeyRunning: 1, Ahead: 2},
			"job 1-3: waiting in key customer-7's stream (3 waiting, 1 running, 2 ahead of it): waits for its key's cap (key_concurrency 1)"},
		{work.Location{ID: "1-4", State: work.StateRunning, Key: "customer-9", Entry: "1-4", Consumer: "web1/run-2", Deliveries: 1,
			Idle: 2 * time.Second, KeyWaiting: 10, KeyRunning: 4},
			"job 1-4: running on web1/run-2, delivery 1 of entry 1-4, last touched 2s ago; key customer-9 (10 waiting, 4 running)"},
	} {
		if got := describeKeyed(cfg, &tc.loc, jobHolder{}); got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
}

// status says when it read only the first MaxKeyStreamsRead key streams.
func TestPrintKeysPartial(t *testing.T) {
	var b bytes.Buffer
	printKeys(&b, &work.KeyReport{Keys: 2, Waiting: 3, Running: 1, Partial: true,
		Top: []work.KeyLoad{{Key: "a", Waiting: 2, Running: 1, Cap: 1, AtCap: true}, {Key: "b", Waiting: 1}}, NAtCap: 1, AtCap: []string{"a"}})
	out := b.String()
	for _, want := range []string{"keys  2 with jobs: 3 waiting, 1 running; 1 at their cap: a (the first 10000 key streams only)",
		"(at cap 1)"} {
		if !strings.Contains(out, want) {
			t.Errorf("status keys block misses %q:\n%s", want, out)
		}
	}
}
