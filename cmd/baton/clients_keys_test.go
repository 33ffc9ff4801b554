package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/work"
)

// keyedCall is one enqueue call of TestClientsEnqueueWithKey: its jobs,
// each with its options for the drivers and for the Go client.
type keyedCall struct {
	name string
	jobs []keyedJob
	many bool // one enqueue_many / enqueueMany call, else one enqueue
}

type keyedJob struct {
	payload string
	key     string // "" for none
	opts    map[string]any
	goOpts  []work.Option
}

// TestClientsEnqueueWithKey: jobs enqueued with a key (docs/keys.md) from
// Python and from Node are the jobs the Go client enqueues: a keyed job
// without a delay waits in its key's stream (the keys' enqueue script), a
// delayed one is scheduled with its key in its record, a keyed job with a
// unique key is refused as a duplicate while its twin waits, and a batch
// that mixes keyed and unkeyed jobs (priorities, unique keys) gets its ids
// in the Go client's order. The records in Redis are the Go client's byte
// for byte (but for the job's id), baton job says where each job is as it
// says it of the Go client's, and so does each client's own lookup (a
// wait for a keyed job in its list times out rather than calling it
// unknown). Run by real holders under key_concurrency = 1, each job runs
// once with BATON_KEY set to its key, and no two jobs of a key ever run at
// once (sampled by the jobs themselves).
func TestClientsEnqueueWithKey(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.extraEnv = quickExit()
	pythonClient(t)
	nodeClient(t)
	ctx := context.Background()
	past := time.Now().Add(-time.Hour)
	calls := []keyedCall{
		{name: "a batch of key a", many: true, jobs: []keyedJob{{payload: "a1", key: "a"}, {payload: "a2", key: "a"}, {payload: "a3", key: "a"}}},
		{name: "key b high", jobs: []keyedJob{{payload: "b1", key: "b", opts: map[string]any{"priority": "high"},
			goOpts: []work.Option{work.WithPriority(work.PriorityHigh)}}}},
		{name: "mixed", jobs: []keyedJob{
			{payload: "m1"},
			{payload: "m2", key: "a", opts: map[string]any{"max_attempts": 2}, goOpts: []work.Option{work.MaxAttempts(2)}},
			{payload: "m3", opts: map[string]any{"priority": "low"}, goOpts: []work.Option{work.WithPriority(work.PriorityLow)}},
			{payload: "m4", key: "b", opts: map[string]any{"unique_key": "ku"}, goOpts: []work.Option{work.UniqueKey("ku")}},
			{payload: "m5", key: "customer-é 42", opts: map[string]any{"timeout_ms": 30000, "priority": "low"},
				goOpts: []work.Option{work.Timeout(30 * time.Second), work.WithPriority(work.PriorityLow)}},
		}},
		{name: "delayed", jobs: []keyedJob{{payload: "d1", key: "a", opts: map[string]any{"delay_ms": 1500},
			goOpts: []work.Option{work.In(1500 * time.Millisecond)}}}},
		{name: "duplicate", jobs: []keyedJob{{payload: "dup", key: "b", opts: map[string]any{"unique_key": "ku"},
			goOpts: []work.Option{work.UniqueKey("ku")}}}},
		{name: "unique for", jobs: []keyedJob{{payload: "u1", key: "c", opts: map[string]any{"unique_key": "kt", "unique_for_ms": 60000},
			goOpts: []work.Option{work.UniqueKey("kt"), work.UniqueFor(time.Minute)}}}},
		{name: "past", jobs: []keyedJob{{payload: "p1", key: "c", opts: map[string]any{"at_ms": past.UnixMilli()},
			goOpts: []work.Option{work.At(past)}}}},
	}
	type got struct {
		id  string
		dup bool
	}
	from := []producer{"go", "python", "node"}
	ids := map[producer][]got{} // every job's id, in calls' order
	for _, p := range from {
		q := "key-" + string(p)
		r.fresh(q)
		// The enqueue script loaded (a job with an option loads it): else
		// the first producer's unkeyed jobs with options would come back
		// NOSCRIPT and be sent again after its keyed ones (sent with EVAL),
		// and take later ids than the next producers' would.
		if _, err := work.Enqueue(ctx, r.client(), "warm", []byte("x"), work.MaxAttempts(1)); err != nil {
			t.Fatal(err)
		}
		if p == "go" {
			for _, c := range calls {
				msgs := make([]work.Message, len(c.jobs))
				for i, j := range c.jobs {
					msgs[i] = work.Message{Payload: []byte(j.payload), Options: j.goOpts}
					if j.key != "" {
						msgs[i].Options = append(slices.Clip(j.goOpts), work.Key(j.key))
					}
				}
				res, err := work.EnqueueMany(ctx, r.client(), q, msgs)
				var de *work.DuplicateError
				if err != nil && !errors.As(err, &de) {
					t.Fatalf("go: %s: %v", c.name, err)
				}
				for i, id := range res {
					ids[p] = append(ids[p], got{id, de != nil && slices.Contains(de.Jobs, i)})
				}
			}
			continue
		}
		var ops []map[string]any
		for _, c := range calls {
			items := make([]map[string]any, len(c.jobs))
			for i, j := range c.jobs {
				o := map[string]any{}
				for k, v := range j.opts {
					o[k] = v
				}
				if j.key != "" {
					o["key"] = j.key
				}
				items[i] = map[string]any{"payload": j.payload, "opts": o}
			}
			switch {
			case !c.many && len(items) == 1:
				ops = append(ops, map[string]any{"op": "enqueue", "payload": items[0]["payload"], "opts": items[0]["opts"]})
			case c.many: // one set of options for the batch
				var payloads []string
				for _, j := range c.jobs {
					payloads = append(payloads, j.payload)
				}
				ops = append(ops, map[string]any{"op": "many", "payloads": payloads, "opts": items[0]["opts"]})
			default:
				ops = append(ops, map[string]any{"op": "items", "items": items})
			}
		}
		for n, res := range r.drive(p, q, nil, ops...) {
			if res["error"] != nil {
				t.Fatalf("%s: %s: %v", p, calls[n].name, res["error"])
			}
			if res["id"] != nil {
				ids[p] = append(ids[p], got{res["id"].(string), res["duplicate"] == true})
				continue
			}
			for _, v := range res["ids"].([]any) {
				v := v.(map[string]any)
				ids[p] = append(ids[p], got{v["id"].(string), v["duplicate"] == true})
			}
		}
	}
	var jobs []keyedJob
	for _, c := range calls {
		jobs = append(jobs, c.jobs...)
	}
	dupOf := func(p producer, i int) int { // the job a duplicate's id is of, -1 for none
		for n, g := range ids[p] {
			if g.id == ids[p][i].id && n != i {
				return n
			}
		}
		return -1
	}

	// Ids: the duplicate is the one Go refuses, with its twin's id; the
	// others in the Go client's order.
	order := func(p producer) []int {
		var idx []int
		for i, g := range ids[p] {
			if !g.dup {
				idx = append(idx, i)
			}
		}
		slices.SortFunc(idx, func(a, b int) int {
			if idAfter(ids[p][a].id, ids[p][b].id) {
				return 1
			}
			return -1
		})
		return idx
	}
	for _, p := range from {
		if len(ids[p]) != len(jobs) {
			t.Fatalf("%s: %d ids for %d jobs", p, len(ids[p]), len(jobs))
		}
		for i := range jobs {
			if ids[p][i].dup != ids["go"][i].dup || dupOf(p, i) != dupOf("go", i) {
				t.Errorf("%s: job %s: %+v (twin %d), want as the Go client's %+v (twin %d)", p, jobs[i].payload, ids[p][i], dupOf(p, i), ids["go"][i], dupOf("go", i))
			}
		}
		if got, want := order(p), order("go"); !slices.Equal(got, want) {
			t.Errorf("%s: jobs in id order %v, want the Go client's %v", p, got, want)
		}
	}
	if !ids["go"][slices.IndexFunc(jobs, func(j keyedJob) bool { return j.payload == "dup" })].dup {
		t.Fatal("go: a keyed job with the unique key of one waiting in its key's stream was added")
	}

	// Where each job is, before any holder runs: as baton job says it, the
	// record (in the key jobs hash, the scheduled records or the stream)
	// byte for byte but for the id; the clients' own lookups agree.
	where := map[int]string{}
	for _, p := range from {
		q := "key-" + string(p)
		var list []string
		for _, g := range ids[p] {
			list = append(list, g.id)
		}
		locs := r.batonJobs(q, list)
		for i, loc := range locs {
			sig := fmt.Sprint(loc["state"], " priority ", loc["priority"], " key ", loc["key"], " ", loc["key_waiting"], " waiting ",
				loc["key_running"], " running, ahead ", loc["ahead"], " ", r.entryFields(q, list[i], loc), r.record(q, list[i]))
			if p == "go" {
				where[i] = sig
			} else if sig != where[i] {
				t.Errorf("%s: job %s: %s\nwant as the Go client's: %s", p, jobs[i].payload, sig, where[i])
			}
		}
		if p == "go" {
			continue
		}
		r.sameAsBatonJob(p, q, list, locs)
		out, errOut, code := r.baton("job", "--queue", q, list[0])
		if want := "job " + list[0] + ": waiting in key a's stream (4 waiting, 0 running, 0 ahead of it)"; code != 0 || !strings.HasPrefix(out, want) {
			t.Errorf("%s: baton job of a keyed job: exit %d %q %s, want %q", p, code, out, errOut, want)
		}
		w := r.drive(p, q, nil, map[string]any{"op": "wait", "id": list[0], "timeout_ms": 100})[0]
		if w["class"] != "TimeoutError" {
			t.Errorf("%s: wait for a keyed job in its key's stream: %v, want a TimeoutError", p, w)
		}
	}
	for i, j := range jobs {
		if j.key != "" && !ids["go"][i].dup && !strings.Contains(where[i], " key "+j.key+" ") &&
			!strings.Contains(where[i], "scheduled") {
			t.Errorf("go: job %s: %s, want it in key %s's stream", j.payload, where[i], j.key)
		}
	}

	// The holders, one per queue, key_concurrency = 1, concurrency 4.
	dir, samples := filepath.Join(r.dir, "running"), filepath.Join(r.dir, "samples")
	job := r.script("keyjob.sh", `p=$(cat)
d=`+dir+`/$BATON_QUEUE/$BATON_KEY
mkdir -p $d
touch $d/$$
n=0
for f in $d/*; do
  s=$(cut -d' ' -f3 /proc/${f##*/}/stat 2>/dev/null)
  if [ -n "$s" ] && [ "$s" != Z ]; then n=$((n+1)); fi
done
[ -n "$BATON_KEY" ] && echo "$BATON_QUEUE/$BATON_KEY $n" >> `+samples+`
sleep 0.2
rm -f $d/$$
echo "ran $BATON_QUEUE $BATON_JOB_ID $p [$BATON_KEY]" >> `+samples+"\n")
	cfg := r.keyConfig("key_concurrency = 1\n")
	var holders []*process
	for _, p := range from {
		holders = append(holders, r.start("run", "--config", cfg, "--queue", "key-"+string(p), "--concurrency", "4",
			"--retention", "1h", "--poll-interval", "50ms", "--lifetime", "1m", "--standby-slots", "0", "--shutdown-grace", "500ms", "--", job))
	}
	for _, p := range from {
		eventually(t, 60*time.Second, fmt.Sprintf("every job of %s done", p), func() bool {
			for _, g := range ids[p] {
				loc, err := work.Locate(ctx, r.client(), "key-"+string(p), g.id)
				if err != nil || loc.State != work.StateDone {
					return false
				}
			}
			return true
		})
	}
	for _, h := range holders {
		_ = h.cmd.Process.Signal(syscall.SIGTERM)
		h.wait(t, 15*time.Second)
	}
	ran := map[string]string{}
	for _, l := range readLines(t, samples) {
		if q, rest, ok := strings.Cut(strings.TrimPrefix(l, "ran "), " "); ok && strings.HasPrefix(l, "ran ") {
			id, what, _ := strings.Cut(rest, " ")
			ran[q+" "+id] += what + ";"
		}
	}
	most := mostOfKey(t, samples)
	for _, p := range from {
		q := "key-" + string(p)
		for i, j := range jobs {
			if ids[p][i].dup {
				continue
			}
			if want := j.payload + " [" + j.key + "];"; ran[q+" "+ids[p][i].id] != want {
				t.Errorf("%s: job %s ran as %q, want once as %q", p, j.payload, ran[q+" "+ids[p][i].id], want)
			}
		}
		for _, k := range []string{"a", "b", "c"} {
			if most[q+"/"+k] != 1 {
				t.Errorf("%s: most jobs of key %s running at once: %d, want 1 (key_concurrency)", p, k, most[q+"/"+k])
			}
		}
		if left := r.keysLeft(q); len(left) > 0 {
			t.Errorf("%s: keys' Redis keys left once all is done: %v", p, left)
		}
	}

	// Done, the unique key is free again.
	for _, p := range from[1:] {
		res := r.drive(p, "key-"+string(p), nil, map[string]any{"op": "enqueue", "payload": "again", "opts": map[string]any{"key": "b", "unique_key": "ku"}})[0]
		if res["duplicate"] != false || res["id"] == nil {
			t.Errorf("%s: after its job was done, unique key ku still held: %v", p, res)
		}
	}
}

// record is a scheduled job's record, byte for byte but for the orig pair
// the script appends, or a keyed job's index entry (its entry, level and
// key: the entry named as the job's own id when it is).
func (r *rig) record(q, id string) string {
	r.t.Helper()
	k := work.KeysFor(q)
	ctx := context.Background()
	if v, err := r.client().HGet(ctx, k.KeyJobs(), id).Result(); err == nil {
		return fmt.Sprintf(" index: %q", strings.Replace(v, id+"\n", "(job id)\n", 1))
	}
	b, err := r.client().HGet(ctx, k.ScheduledJobs, id).Bytes()
	if err != nil {
		return ""
	}
	// the orig pair the script appends: "orig" and the id, packed
	suffix := append([]byte("\xa4orig"), byte(0xa0|len(id)))
	suffix = append(suffix, id...)
	if !bytes.HasSuffix(b, suffix) {
		r.t.Fatalf("record of job %s in %s: %q, not ending with its id", id, k.ScheduledJobs, b)
	}
	return fmt.Sprintf(" record in %s: %q", strings.TrimPrefix(k.ScheduledJobs, k.Stream), b[:len(b)-len(suffix)])
}
