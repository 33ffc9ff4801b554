package main

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

// panicked returns the log of a baton process of the rig that died of a Go
// panic, or "".
func (r *rig) panicked() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.procs {
		if done, code := p.exited(); done && code == 2 && strings.Contains(p.log(), "panic:") {
			return p.log()
		}
	}
	return ""
}

// TestAbsurdAttemptsFieldNeverCrashesHolders (issue #23): a producer's raw
// XADD whose attempts field is 2^63−1 overflowed the attempt count; once a
// holder had died under the job (kill -9 here), every holder after it that
// replayed it panicked in the backoff (a negative shift), and holders
// crashed in a loop with the queue stopped behind the job. Now the entry is
// dead-lettered as malformed without running, the jobs behind it run, and
// no holder crashes.
func TestAbsurdAttemptsFieldNeverCrashesHolders(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	job := r.script("job.sh", `p=$(cat)
if [ "$p" = bad ]; then
  [ -e `+r.dir+`/killed ] || { touch `+r.dir+`/killed; kill -9 $PPID; sleep 5; }
  exit 1
fi
`)
	bad, err := r.client().XAdd(context.Background(), &redis.XAddArgs{Stream: work.KeysFor("default").Stream,
		Values: []any{work.PayloadField, "bad", "attempts", "9223372036854775807"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	payloads := []string{"enqueue", "-q"}
	for i := 0; i < 20; i++ {
		payloads = append(payloads, "good-"+strconv.Itoa(i))
	}
	r.baton(payloads...)
	stop := r.cron(200*time.Millisecond, "run", "--max-attempts", "3", "--retry-backoff", "50ms", "--poll-interval", "50ms", "--lifetime", "1m", "--", job)
	defer r.killHolders("default")
	defer stop()
	eventually(t, 60*time.Second, "bad entry dead-lettered and the good jobs done", func() bool {
		if log := r.panicked(); log != "" {
			t.Fatalf("a holder crashed:\n%s", log)
		}
		s := r.status()
		return s.Jobs.Done == 20 && len(r.dead(t)) == 1
	})
	d := r.dead(t)[0]
	if d.Reason != "malformed" || d.JobID != bad || !strings.Contains(d.Error, `"attempts"`) {
		t.Fatalf("dead letter %+v, want %s malformed, naming its attempts field", d, bad)
	}
	stop()
	if log := r.panicked(); log != "" {
		t.Fatalf("a holder crashed:\n%s", log)
	}
}

// TestNormalJobStartsAtOnceOnPriorityQueue (issue #23): on a queue that
// once used --priority (high only, so it has no low stream), an idle
// holder's blocking read over the three levels failed at once and waited
// out a backoff, so a normal job started about 550 ms after it was
// enqueued. Now the missing stream is created and the read blocks: a new
// job wakes the holder at once.
func TestNormalJobStartsAtOnceOnPriorityQueue(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	started := filepath.Join(r.dir, "started")
	job := r.script("job.sh", "date +%s%N >> "+started+"\n")
	if _, errOut, code := r.baton("enqueue", "--priority", "high", "first"); code != 0 {
		t.Fatalf("enqueue: %d %s", code, errOut)
	}
	r.start("run", "--lifetime", "1m", "--", job)
	defer r.killHolders("default")
	eventually(t, 20*time.Second, "the high job ran", func() bool { return len(readLines(t, started)) == 1 })
	var waits []time.Duration
	for i := 0; i < 5; i++ {
		time.Sleep(time.Second) // the holder is idle, in its read
		at := time.Now()
		if err := r.client().XAdd(context.Background(), &redis.XAddArgs{Stream: work.KeysFor("default").Stream,
			Values: []any{work.PayloadField, "normal-" + strconv.Itoa(i)}}).Err(); err != nil {
			t.Fatal(err)
		}
		var lines []string
		eventually(t, 20*time.Second, "the normal job ran", func() bool { lines = readLines(t, started); return len(lines) == i+2 })
		ns, err := strconv.ParseInt(lines[i+1], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, time.Unix(0, ns).Sub(at))
	}
	slices.Sort(waits)
	if waits[len(waits)/2] > 300*time.Millisecond {
		t.Fatalf("normal jobs started %v after they were enqueued, want a blocked read woken at once", waits)
	}
	t.Logf("started %v after the XADD", waits)
}
