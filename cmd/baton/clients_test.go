package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/work"
)

// The producer clients' tests: clients/python and clients/node, driven by
// testdata/clients/driver.py and driver.js, against the rig's real Redis
// and real baton holders, each client as its package manager installs it
// (pip install, npm pack). They need Debian's python3-redis, pip and
// setuptools, and node and npm with ioredis in
// ${XDG_CACHE_HOME:-~/.cache}/baton-clients (scripts/install-test-deps.sh
// installs them): without them they fail, saying so.

// producer is one way to enqueue: "cli", "python" or "node".
type producer string

var producers = []producer{"cli", "python", "node"}

var (
	pythonOnce sync.Once
	pythonBin  string // a python3 with redis-py
	pythonPath string // where clients/python was installed with pip
	pythonErr  error
)

// pythonClient installs clients/python with pip (offline: no build
// isolation, no index) into a directory of its own (installOnce).
func pythonClient(t *testing.T) (bin, path string) {
	t.Helper()
	pythonOnce.Do(func() {
		for _, c := range []string{"/usr/bin/python3", "python3"} {
			if exec.Command(c, "-c", "import redis").Run() == nil {
				pythonBin = c
				break
			}
		}
		if pythonBin == "" {
			pythonErr = fmt.Errorf("no python3 with redis-py: run scripts/install-test-deps.sh (apt-get install python3-redis)")
			return
		}
		pythonPath, pythonErr = installOnce("py", "../../clients/python", func(dir string) error {
			out, err := exec.Command(pythonBin, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-index", "--no-deps",
				"--target", dir, "../../clients/python").CombinedOutput()
			if err != nil {
				return fmt.Errorf("pip install ./clients/python: %v\n%s(scripts/install-test-deps.sh installs python3-pip and python3-setuptools)", err, out)
			}
			return nil
		})
	})
	if pythonErr != nil {
		t.Fatal(pythonErr)
	}
	return pythonBin, pythonPath
}

var (
	nodeOnce   sync.Once
	nodePkg    string // clients/node as npm packs it, unpacked
	nodeModDir string // where ioredis is
	nodeErr    error
)

// nodeClient packs clients/node with npm (what npm install --install-links
// installs: no symbolic link survives it) and unpacks it into a directory
// of its own (installOnce); ioredis comes from
// ${XDG_CACHE_HOME:-~/.cache}/baton-clients.
func nodeClient(t *testing.T) (pkg, modules string) {
	t.Helper()
	nodeOnce.Do(func() {
		for _, c := range []string{"node", "npm"} {
			if _, err := exec.LookPath(c); err != nil {
				nodeErr = fmt.Errorf("%s is needed for the Node client's tests: run scripts/install-test-deps.sh (apt-get install nodejs npm)", c)
				return
			}
		}
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		nodeModDir = filepath.Join(cache, "baton-clients", "node_modules")
		if _, err := os.Stat(filepath.Join(nodeModDir, "ioredis", "package.json")); err != nil {
			nodeErr = fmt.Errorf("ioredis is needed for the Node client's tests in %s: run scripts/install-test-deps.sh", nodeModDir)
			return
		}
		dir, err := installOnce("node", "../../clients/node", func(dir string) error {
			pack := exec.Command("npm", "pack", "--silent", "--pack-destination", dir)
			pack.Dir = "../../clients/node"
			out, err := pack.Output()
			if err != nil {
				return fmt.Errorf("npm pack ./clients/node: %v", err)
			}
			tgz := filepath.Join(dir, strings.TrimSpace(string(out)))
			if out, err := exec.Command("tar", "-xzf", tgz, "-C", dir).CombinedOutput(); err != nil {
				return fmt.Errorf("unpack %s: %v %s", tgz, err, out)
			}
			return nil
		})
		nodePkg, nodeErr = filepath.Join(dir, "package"), err
	})
	if nodeErr != nil {
		t.Fatal(nodeErr)
	}
	return nodePkg, nodeModDir
}

// installOnce installs the client in src with install, into a directory
// of the system's temp dir named after a hash of src's files: made once
// per version of the client (the next runs reuse it), and never half made
// (installed aside, then renamed).
func installOnce(kind, src string, install func(dir string) error) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if strings.Contains(path, "egg-info") || strings.Contains(path, "__pycache__") ||
			strings.Contains(path, string(filepath.Separator)+"build"+string(filepath.Separator)) {
			return nil // what pip and python leave in the tree
		}
		b, err := os.ReadFile(path) // through the symbolic links
		fmt.Fprintf(h, "%s %d\n", path, len(b))
		h.Write(b)
		return err
	})
	if err != nil {
		return "", err
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("baton-client-%s-%x", kind, h.Sum(nil)[:8]))
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	tmp, err := os.MkdirTemp("", "baton-client-"+kind+"-new-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := install(tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil && !os.IsExist(err) {
		if _, serr := os.Stat(dir); serr != nil { // not another run's, made meanwhile
			return "", err
		}
	}
	return dir, nil
}

// drive runs ops through a client's driver, one JSON result per op.
func (r *rig) drive(p producer, queue string, req map[string]any, ops ...map[string]any) []map[string]any {
	r.t.Helper()
	if req == nil {
		req = map[string]any{}
	}
	req["redis"], req["queue"], req["ops"] = r.redis.URL(), queue, ops
	in, _ := json.Marshal(req)
	var cmd *exec.Cmd
	switch p {
	case "python":
		bin, path := pythonClient(r.t)
		cmd = exec.Command(bin, "testdata/clients/driver.py")
		cmd.Env = append(os.Environ(), "PYTHONPATH="+path)
	case "node":
		client, mods := nodeClient(r.t)
		cmd = exec.Command("node", "testdata/clients/driver.js")
		cmd.Env = append(os.Environ(), "NODE_PATH="+mods, "BATON_NODE_CLIENT="+client)
	default:
		r.t.Fatalf("no driver for %s", p)
	}
	cmd.Stdin = bytes.NewReader(in)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		r.t.Fatalf("%s driver: %v\n%s", p, err, errb.String())
	}
	var res []map[string]any
	dec := json.NewDecoder(&out)
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			r.t.Fatalf("%s driver: %v", p, err)
		}
		res = append(res, m)
	}
	if len(res) != len(ops) {
		r.t.Fatalf("%s driver: %d results for %d ops\n%s", p, len(res), len(ops), errb.String())
	}
	return res
}

// batonJobs is `baton job --json` of each job, normalized as the drivers
// print a lookup: times as unix milliseconds, without what only the CLI
// knows (the holder's pid and host) or what changes between two reads
// (idle). Four at a time.
func (r *rig) batonJobs(q string, ids []string) []map[string]any {
	r.t.Helper()
	out := make([]map[string]any, len(ids))
	errs := make([]string, len(ids))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			cmd := r.cmd("job", "--queue", q, "--json", id)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != 1) {
				errs[i] = fmt.Sprintf("baton job %s: %v %s", id, err, stderr.String())
				return
			}
			if err := json.Unmarshal(stdout.Bytes(), &out[i]); err != nil {
				errs[i] = fmt.Sprintf("baton job %s: %v %q", id, err, stdout.String())
			}
		}()
	}
	wg.Wait()
	for i := range ids {
		if errs[i] != "" {
			r.t.Fatal(errs[i])
		}
		out[i] = normalizeLocation(r.t, out[i])
	}
	return out
}

func normalizeLocation(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	ms := func(v any) any {
		s, ok := v.(string)
		if !ok {
			return v
		}
		tm, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatalf("time %q: %v", s, err)
		}
		return float64(tm.UnixMilli())
	}
	for _, k := range []string{"idle_ns", "pid", "host", "since", "job_pid"} {
		delete(m, k)
	}
	for _, k := range []string{"due", "done_at"} {
		if v, ok := m[k]; ok {
			m[k] = ms(v)
		}
	}
	if d, ok := m["dead_letter"].(map[string]any); ok {
		d["failed_at"] = ms(d["failed_at"])
		delete(d, "payload_encoding")
	}
	return m
}

// clientJob is one job of TestClientsEnqueueLikeTheCLI: its options for the
// drivers (durations and times in ms) and as enqueue's flags, and how it
// ends.
type clientJob struct {
	name    string
	payload []string // more than one: a batch
	opts    map[string]any
	flags   []string
	dupOf   string // a duplicate of this job
	end     string // done, or dead:<reason>:<attempts>
}

// TestClientsEnqueueLikeTheCLI: a job enqueued from Python and from Node
// with each option of baton enqueue (delay, time, unique key and its
// duration, priority, timeout, max attempts, batches) gets an id like the
// CLI's job (growing in enqueue order, a duplicate the first job's id and
// said to be one), the same fields in Redis, the same answer from baton
// job (and from the client's own lookup), and, run by a real baton holder,
// the same outcome: done, or dead of a timeout or after its attempts.
func TestClientsEnqueueLikeTheCLI(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.extraEnv = quickExit()
	pythonClient(t)
	nodeClient(t)
	// at: each producer's "at" job is due 4s after its first enqueue (the
	// race detector makes each CLI call slow), and nothing moves it before
	// a holder runs.
	at := map[producer]int64{}
	past := time.Now().Add(-time.Hour).UnixMilli()
	rfc := func(ms int64) string { return time.UnixMilli(ms).Format(time.RFC3339Nano) }
	jobs := []clientJob{
		{name: "plain", payload: []string{"ok-plain"}, end: "done"},
		{name: "batch", payload: []string{"ok-b1", "ok-b2"}, end: "done"},
		{name: "delay", payload: []string{"ok-delay"}, opts: map[string]any{"delay_ms": 1500}, flags: []string{"--in", "1500ms"}, end: "done"},
		{name: "at", payload: []string{"ok-at"}, end: "done"}, // options set per producer
		{name: "past", payload: []string{"ok-past"}, opts: map[string]any{"at_ms": past}, flags: []string{"--at", rfc(past)}, end: "done"},
		{name: "unique", payload: []string{"ok-unique"}, opts: map[string]any{"unique_key": "u-1"}, flags: []string{"--unique-key", "u-1"}, end: "done"},
		{name: "dup", payload: []string{"ok-dup"}, opts: map[string]any{"unique_key": "u-1"}, flags: []string{"--unique-key", "u-1"}, dupOf: "unique"},
		{name: "uniquefor", payload: []string{"ok-uniquefor"}, opts: map[string]any{"unique_key": "u-2", "unique_for_ms": 60000},
			flags: []string{"--unique-key", "u-2", "--unique-for", "1m"}, end: "done"},
		{name: "high", payload: []string{"ok-high"}, opts: map[string]any{"priority": "high"}, flags: []string{"--priority", "high"}, end: "done"},
		{name: "low batch", payload: []string{"ok-l1", "ok-l2", "ok-l3"}, opts: map[string]any{"priority": "low"}, flags: []string{"--priority", "low"}, end: "done"},
		{name: "unique batch", payload: []string{"ok-ub1", "ok-ub2"}, opts: map[string]any{"unique_key": "u-3", "max_attempts": 3},
			flags: []string{"--unique-key", "u-3", "--max-attempts", "3"}, end: "done"},
		{name: "timeout", payload: []string{"sleep"}, opts: map[string]any{"timeout_ms": 300, "max_attempts": 1},
			flags: []string{"--timeout", "300ms", "--max-attempts", "1"}, end: "dead:timeout:1"},
		{name: "attempts", payload: []string{"fail"}, opts: map[string]any{"max_attempts": 2}, flags: []string{"--max-attempts", "2"}, end: "dead:failed:2"},
	}
	type result struct{ ID, Duplicate any }
	// ids[p][name] is the ids of a job's payloads.
	ids := map[producer]map[string][]result{}
	for _, p := range producers {
		q := string(p)
		r.fresh(q)
		ids[p] = map[string][]result{}
		at[p] = time.Now().Add(4 * time.Second).UnixMilli()
		jobs[indexOf(jobs, "at")].opts = map[string]any{"at_ms": at[p]}
		jobs[indexOf(jobs, "at")].flags = []string{"--at", rfc(at[p])}
		if p == "cli" {
			for _, j := range jobs {
				out, errOut, code := r.baton(append(append([]string{"enqueue", "--queue", q, "--json"}, j.flags...), j.payload...)...)
				if code != 0 {
					t.Fatalf("cli enqueue %s: exit %d %s", j.name, code, errOut)
				}
				for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
					var res struct {
						ID        string
						Duplicate bool
					}
					if err := json.Unmarshal([]byte(line), &res); err != nil {
						t.Fatalf("cli enqueue %s: %v %q", j.name, err, out)
					}
					ids[p][j.name] = append(ids[p][j.name], result{res.ID, res.Duplicate})
				}
			}
			continue
		}
		var ops []map[string]any
		for _, j := range jobs {
			if len(j.payload) == 1 {
				ops = append(ops, map[string]any{"op": "enqueue", "payload": j.payload[0], "opts": j.opts})
			} else {
				ops = append(ops, map[string]any{"op": "many", "payloads": j.payload, "opts": j.opts})
			}
		}
		for n, res := range r.drive(p, q, nil, ops...) {
			j := jobs[n]
			if res["error"] != nil {
				t.Fatalf("%s enqueue %s: %v", p, j.name, res["error"])
			}
			if len(j.payload) == 1 {
				ids[p][j.name] = []result{{res["id"], res["duplicate"]}}
				continue
			}
			for _, v := range res["ids"].([]any) {
				v := v.(map[string]any)
				ids[p][j.name] = append(ids[p][j.name], result{v["id"], v["duplicate"]})
			}
		}
	}

	// Ids: job ids, growing in enqueue order; a duplicate is the first
	// job's id, said to be one; a batch's second job with the first's
	// unique key too.
	for _, p := range producers {
		var last string
		for _, j := range jobs {
			for n, res := range ids[p][j.name] {
				id, _ := res.ID.(string)
				dup := j.dupOf != "" || (j.name == "unique batch" && n == 1)
				want := id
				switch {
				case j.dupOf != "":
					want = ids[p][j.dupOf][0].ID.(string)
				case dup:
					want = ids[p][j.name][0].ID.(string)
				}
				if id != want || res.Duplicate != dup {
					t.Errorf("%s: %s job %d: id %v duplicate %v, want %s duplicate %v", p, j.name, n+1, res.ID, res.Duplicate, want, dup)
				}
				if !dup {
					if !idAfter(id, last) {
						t.Errorf("%s: %s job %d: id %q not after %q", p, j.name, n+1, id, last)
					}
					last = id
				}
			}
		}
	}

	// each is every job of a producer's queue: its spec, its index in a
	// batch, its id.
	type one struct {
		j  clientJob
		n  int
		id string
	}
	each := func(p producer) (all []one, idList []string) {
		for _, j := range jobs {
			for n, res := range ids[p][j.name] {
				all = append(all, one{j, n, res.ID.(string)})
				idList = append(idList, res.ID.(string))
			}
		}
		return all, idList
	}

	// What baton job says of each job before any holder runs, the client's
	// own lookup, and the fields in Redis: alike for the three producers.
	ctx := context.Background()
	seen := map[string]string{}
	for _, p := range producers {
		q := string(p)
		all, idList := each(p)
		locs := r.batonJobs(q, idList)
		for i, o := range all {
			loc := locs[i]
			sig := fmt.Sprint(loc["state"], " ", loc["priority"], " ahead ", loc["ahead"], " ", r.entryFields(q, o.id, loc))
			if o.j.name == "at" && loc["due"] != float64(at[p]) {
				t.Errorf("%s: at job due %v, want %d", p, loc["due"], at[p])
			}
			key := o.j.name + "/" + strconv.Itoa(o.n)
			if p == "cli" {
				seen[key] = sig
			} else if seen[key] != sig {
				t.Errorf("%s: %s job %d before running: %s, want as the CLI's: %s", p, o.j.name, o.n+1, sig, seen[key])
			}
		}
		ttl, err := r.client().PTTL(ctx, work.KeysFor(q).Unique("u-2")).Result()
		if err != nil || ttl <= 0 || ttl > time.Minute {
			t.Errorf("%s: unique key u-2 held for %v (%v), want at most 1m", p, ttl, err)
		}
		if p != "cli" {
			r.sameAsBatonJob(p, q, idList, locs)
		}
	}

	// The holders: each queue's jobs run by a real baton run.
	ran := filepath.Join(r.dir, "ran")
	job := r.script("job.sh", `p=$(cat)
case "$p" in
fail) exit 1;;
sleep) exec sleep 10;;
esac
echo "$BATON_JOB_ID $p" >> `+ran+"\n")
	var holders []*process
	for _, p := range producers {
		holders = append(holders, r.start("run", "--queue", string(p), "--retention", "1h", "--retry-backoff", "100ms", "--lifetime", "1m",
			"--standby-slots", "0", "--shutdown-grace", "500ms", "--", job))
	}
	for _, p := range producers {
		_, idList := each(p)
		eventually(t, 60*time.Second, fmt.Sprintf("every job of %s settled", p), func() bool {
			for _, id := range idList {
				loc, err := work.Locate(ctx, r.client(), string(p), id)
				if err != nil || loc.State != work.StateDone && loc.State != work.StateDead {
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

	// The outcomes, as baton job says them, and as the clients do.
	ranBy := map[string]string{}
	for _, line := range readLines(t, ran) {
		id, payload, _ := strings.Cut(line, " ")
		ranBy[id] += payload + ";"
	}
	for _, p := range producers {
		q := string(p)
		all, idList := each(p)
		locs := r.batonJobs(q, idList)
		for i, o := range all {
			end := o.j.end
			if o.j.dupOf != "" {
				end = jobs[indexOf(jobs, o.j.dupOf)].end
			}
			loc := locs[i]
			got := fmt.Sprint(loc["state"])
			if d, ok := loc["dead_letter"].(map[string]any); ok {
				got = fmt.Sprintf("dead:%v:%v", d["reason"], d["attempts"])
				if d["payload"] != o.j.payload[o.n] {
					t.Errorf("%s: %s job %d: dead letter's payload %v, want %q", p, o.j.name, o.n+1, d["payload"], o.j.payload[o.n])
				}
			}
			if got != end {
				t.Errorf("%s: %s job %d (%s): %s, want %s", p, o.j.name, o.n+1, o.id, got, end)
			}
			dupInBatch := o.j.name == "unique batch" && o.n == 1
			if end == "done" && o.j.dupOf == "" && !dupInBatch && ranBy[o.id] != o.j.payload[o.n]+";" {
				t.Errorf("%s: %s job %d (%s) ran as %q, want once with its payload %q", p, o.j.name, o.n+1, o.id, ranBy[o.id], o.j.payload[o.n])
			}
		}
		if p != "cli" {
			r.sameAsBatonJob(p, q, idList, locs)
		}
	}

	// Done, the unique key is free again: a new job with it is added.
	for _, p := range producers[1:] {
		res := r.drive(p, string(p), nil, map[string]any{"op": "enqueue", "payload": "again", "opts": map[string]any{"unique_key": "u-1"}})[0]
		if res["duplicate"] != false || res["id"] == ids[p]["unique"][0].ID {
			t.Errorf("%s: after its job was done, unique key u-1 still held: %v", p, res)
		}
	}
}

// quickExit spares each baton the race detector's second of sleep at
// exit: these tests start dozens.
func quickExit() []string {
	return []string{"GORACE=" + os.Getenv("GORACE") + " atexit_sleep_ms=0"}
}

func indexOf(jobs []clientJob, name string) int {
	for i, j := range jobs {
		if j.name == name {
			return i
		}
	}
	return -1
}

// idAfter reports whether stream id a comes after b ("" for none).
func idAfter(a, b string) bool {
	if b == "" {
		return true
	}
	num := func(s string) (int64, int64) {
		ms, seq, _ := strings.Cut(s, "-")
		x, _ := strconv.ParseInt(ms, 10, 64)
		y, _ := strconv.ParseInt(seq, 10, 64)
		return x, y
	}
	am, as := num(a)
	bm, bs := num(b)
	return am > bm || am == bm && as > bs
}

// entryFields are a waiting job's fields in its stream entry, sorted, or
// the empty string for a job not in a stream.
func (r *rig) entryFields(q, id string, loc map[string]any) string {
	r.t.Helper()
	entry, _ := loc["entry"].(string)
	if entry == "" {
		return ""
	}
	k := work.KeysFor(q)
	stream := k.Stream
	p, _ := work.ParsePriority(fmt.Sprint(loc["priority"]))
	switch loc["priority"] {
	case "high":
		stream = k.High
	case "low":
		stream = k.Low
	}
	if key, _ := loc["key"].(string); key != "" {
		stream = k.KeyStream(p, key) // a keyed job waits and runs there
	}
	msgs, err := r.client().XRange(context.Background(), stream, entry, entry).Result()
	if err != nil || len(msgs) != 1 {
		r.t.Fatalf("entry %s of job %s: %v %v", entry, id, msgs, err)
	}
	var f []string
	for k, v := range msgs[0].Values {
		if k == "orig" {
			v = "(job id)" // an entry id of another stream, differing by producer
		}
		f = append(f, fmt.Sprintf("%s=%v", k, v))
	}
	sort.Strings(f)
	return strings.Join(f, " ")
}

// sameAsBatonJob checks that a client's lookups of jobs say what baton job
// said of them (want, from batonJobs).
func (r *rig) sameAsBatonJob(p producer, q string, ids []string, want []map[string]any) {
	r.t.Helper()
	var ops []map[string]any
	for _, id := range ids {
		ops = append(ops, map[string]any{"op": "job", "id": id})
	}
	for n, got := range r.drive(p, q, nil, ops...) {
		if got["error"] != nil {
			r.t.Errorf("%s: job(%s): %v", p, ids[n], got["error"])
			continue
		}
		if !reflect.DeepEqual(got, want[n]) {
			r.t.Errorf("%s: job(%s):\n%v\nbaton job says:\n%v", p, ids[n], got, want[n])
		}
	}
}

// TestClientsRefuseBadOptions: each bad option raises in Python and Node,
// with the Go client's message, before anything is sent (the queue has no
// key afterwards); so does one bad job of a batch, named by its number.
// The clients name the queue's keys as work.KeysFor does, and a call with
// wait_replicas that no replica confirms raises, with its ids, as the Go
// client's error says.
func TestClientsRefuseBadOptions(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	goErr := func(opts ...work.Option) string {
		_, err := work.EnqueueMany(ctx, r.client(), "bad", []work.Message{{Payload: []byte("x"), Options: opts}})
		if err == nil {
			t.Fatalf("go client: %v: no error", opts)
		}
		return err.Error()
	}
	_, perr := work.ParsePriority("urgent")
	cases := []struct {
		opts map[string]any
		want string
	}{
		{map[string]any{"delay_ms": -1000}, goErr(work.In(-time.Second))},
		{map[string]any{"unique_key": ""}, goErr(work.UniqueKey(""))},
		{map[string]any{"unique_key": "k", "unique_for_ms": 0.5}, goErr(work.UniqueKey("k"), work.UniqueFor(500*time.Microsecond))},
		{map[string]any{"unique_for_ms": 5000}, goErr(work.UniqueFor(5 * time.Second))},
		{map[string]any{"max_attempts": 0}, goErr(work.MaxAttempts(0))},
		{map[string]any{"max_attempts": 1001}, goErr(work.MaxAttempts(1001))},
		{map[string]any{"timeout_ms": 0}, goErr(work.Timeout(0))},
		{map[string]any{"timeout_ms": -1500}, goErr(work.Timeout(-1500 * time.Millisecond))},
		{map[string]any{"priority": "urgent"}, "job 1: " + perr.Error()},
		{map[string]any{"priority": ""}, `job 1: bad job option: priority "": want high, normal or low`},
		{map[string]any{"delay_ms": 1000, "at_ms": time.Now().UnixMilli()}, "job 1: bad job option: give one of delay and at"},
		// job keys (docs/keys.md), as work.Key refuses them
		{map[string]any{"key": ""}, goErr(work.Key(""))},
		{map[string]any{"key": strings.Repeat("k", 257)}, goErr(work.Key(strings.Repeat("k", 257)))},
		{map[string]any{"key": "customer-{42}"}, goErr(work.Key("customer-{42}"))},
		{map[string]any{"key": "a}"}, goErr(work.Key("a}"))},
		{map[string]any{"key": "line\nbreak"}, goErr(work.Key("line\nbreak"))},
		{map[string]any{"key": "nul\x00"}, goErr(work.Key("nul\x00"))},
		{map[string]any{"key": "é \t\x7f\u200b😀\"\\", "priority": "high", "delay_ms": 1000}, goErr(work.Key("é \t\x7f\u200b😀\"\\"))},
		{map[string]any{"key": json.RawMessage(`"half \ud800"`)}, goErr(work.Key("half \xed\xa0\x80"))},
	}
	var ops []map[string]any
	for _, c := range cases {
		ops = append(ops, map[string]any{"op": "enqueue", "payload": "x", "opts": c.opts})
	}
	batch := map[string]any{"op": "items", "items": []map[string]any{
		{"payload": "a"}, {"payload": "b", "opts": map[string]any{"priority": "high"}}, {"payload": "c", "opts": map[string]any{"max_attempts": 0}},
	}}
	keyBatch := map[string]any{"op": "items", "items": []map[string]any{
		{"payload": "a", "opts": map[string]any{"key": "fine"}}, {"payload": "b", "opts": map[string]any{"key": "not\tfine"}},
	}}
	ops = append(ops, batch, map[string]any{"op": "keys", "key": "k"}, keyBatch,
		map[string]any{"op": "enqueue", "payload": "x", "opts": map[string]any{"key": 42}})
	k := work.KeysFor("bad")
	wantKeys := map[string]any{"stream": k.Stream, "high": k.High, "low": k.Low, "retry": k.Retry, "retry_jobs": k.RetryJobs,
		"scheduled": k.Scheduled, "scheduled_jobs": k.ScheduledJobs, "dead": k.Dead, "dead_index": k.DeadIndex, "done": k.Done,
		"unique": k.Unique("k"), "key_jobs": k.KeyJobs()}
	for _, p := range producers[1:] {
		res := r.drive(p, "bad", nil, ops...)
		for i, c := range cases {
			if res[i]["bad"] != true || res[i]["error"] != c.want {
				t.Errorf("%s: %v: %v, want %q", p, c.opts, res[i], c.want)
			}
		}
		if got, want := res[len(cases)]["error"], goErr(work.MaxAttempts(0))[len("job 1: "):]; got != "job 3: "+want {
			t.Errorf("%s: a batch whose third job is bad: %v, want %q", p, got, "job 3: "+want)
		}
		if got := res[len(cases)+1]; !reflect.DeepEqual(got, wantKeys) {
			t.Errorf("%s: keys %v, want work.KeysFor's %v", p, got, wantKeys)
		}
		if got, want := res[len(cases)+2]["error"], "job 2: "+goErr(work.Key("not\tfine"))[len("job 1: "):]; got != want {
			t.Errorf("%s: a batch whose second job's key is bad: %v, want %q", p, got, want)
		}
		if got, _ := res[len(cases)+3]["error"].(string); res[len(cases)+3]["bad"] != true || !strings.HasPrefix(got, "job 1: bad job option: key: want a") {
			t.Errorf("%s: a key that is not a string: %v, want BadOption", p, res[len(cases)+3])
		}
	}
	if keys, err := r.client().Keys(ctx, "baton:{bad}*").Result(); err != nil || len(keys) > 0 {
		t.Errorf("bad options sent something: %v %v", keys, err)
	}

	// WAIT: no replica here, so none confirms; the jobs are queued.
	_, err := work.EnqueueManyReplicated(ctx, r.client(), "wait-go", []work.Message{{Payload: []byte("x")}}, 1, 100*time.Millisecond)
	if !errors.Is(err, work.ErrNotReplicated) {
		t.Fatalf("go client: %v, want ErrNotReplicated", err)
	}
	for _, p := range producers[1:] {
		q := "wait-" + string(p)
		res := r.drive(p, q, map[string]any{"wait_replicas": 1, "wait_timeout_ms": 100},
			map[string]any{"op": "enqueue", "payload": "w1"},
			map[string]any{"op": "many", "payloads": []string{"w2", "w3"}, "opts": map[string]any{"priority": "high"}})
		for i, n := range []int{1, 2} {
			ids, _ := res[i]["ids"].([]any)
			if res[i]["class"] != "NotReplicated" || res[i]["error"] != err.Error() || len(ids) != n || ids[0] == nil {
				t.Errorf("%s: with wait_replicas 1 and no replica: %v, want NotReplicated %q with %d ids", p, res[i], err, n)
			}
		}
		kq := work.KeysFor(q)
		if n, _ := r.client().XLen(ctx, kq.Stream).Result(); n != 1 {
			t.Errorf("%s: %d jobs queued, want 1", p, n)
		}
		if n, _ := r.client().XLen(ctx, kq.High).Result(); n != 2 {
			t.Errorf("%s: %d high jobs queued, want 2", p, n)
		}
	}
}

// TestClientsLookUpLikeBatonJob: the clients' job(id) says what baton job
// says of a job running on a holder, one waiting for its retry, an unknown
// one, with redis-py decoding replies or not (and with its own parser or
// hiredis); and refuses a bad id with
// work.Locate's message.
func TestClientsLookUpLikeBatonJob(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.extraEnv = quickExit()
	ctx := context.Background()
	var ids []string
	for _, args := range [][]string{{"--priority", "high", "sleep"}, {"--max-attempts", "5", "fail"}} {
		out, errOut, code := r.baton(append([]string{"enqueue"}, args...)...)
		if code != 0 {
			t.Fatalf("enqueue: exit %d %s", code, errOut)
		}
		ids = append(ids, strings.TrimSpace(out))
	}
	job := r.script("job.sh", `[ "$(cat)" = sleep ] && exec sleep 30; exit 1`)
	h := r.start("run", "--concurrency", "2", "--retry-backoff", "1h", "--retry-backoff-max", "1h", "--lifetime", "1m", "--standby-slots", "0", "--shutdown-grace", "500ms", "--", job)
	defer func() {
		_ = h.cmd.Process.Signal(syscall.SIGTERM)
		h.wait(t, 15*time.Second)
	}()
	for i, state := range []string{work.StateRunning, work.StateRetrying} {
		var loc *work.Location
		var err error
		for end := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			loc, err = work.Locate(ctx, r.client(), "default", ids[i])
			if err == nil && loc.State == state {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("job %s: %+v %v, want %s\n%s", ids[i], loc, err, state, h.log())
			}
		}
	}
	ids = append(ids, "1-0")
	want := r.batonJobs("default", ids)
	if want[0]["consumer"] == nil || want[1]["attempts"] != float64(1) || want[2]["state"] != "unknown" {
		t.Fatalf("baton job: %v", want)
	}
	_, lerr := work.Locate(ctx, r.client(), "default", "abc")
	for _, p := range producers[1:] {
		for _, decode := range []bool{false, true} {
			if p == "node" && decode {
				continue
			}
			req := map[string]any{"decode": decode, "python_parser": decode}
			var ops []map[string]any
			for _, id := range append(ids, "abc") {
				ops = append(ops, map[string]any{"op": "job", "id": id})
			}
			res := r.drive(p, "default", req, ops...)
			for i := range ids {
				if !reflect.DeepEqual(res[i], want[i]) {
					t.Errorf("%s (decode %v): job(%s):\n%v\nbaton job says:\n%v", p, decode, ids[i], res[i], want[i])
				}
			}
			if got := res[len(ids)]["error"]; got != lerr.Error() {
				t.Errorf("%s: job(abc): %v, want %q", p, got, lerr)
			}
		}
	}
}

// TestClientsBatchesLikeTheGoClient: a batch of 450 jobs (three script
// calls) with options here and there, sent to a Redis that has not loaded
// the script (NOSCRIPT, loaded, sent again), is added as the Go client adds
// it: ids growing in job order, the duplicate inside the batch given the
// first job's id, each job in its stream or the scheduled set; a job whose
// writes fail is reported as the Go client reports it.
func TestClientsBatchesLikeTheGoClient(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	const n = 450
	items := make([]map[string]any, n)
	msgs := make([]work.Message, n)
	for i := range items {
		p := "job-" + strconv.Itoa(i)
		items[i] = map[string]any{"payload": p}
		msgs[i] = work.Message{Payload: []byte(p)}
	}
	items[10]["opts"], msgs[10].Options = map[string]any{"unique_key": "b"}, []work.Option{work.UniqueKey("b")}
	items[11]["opts"], msgs[11].Options = map[string]any{"unique_key": "b"}, []work.Option{work.UniqueKey("b")}
	items[12]["opts"], msgs[12].Options = map[string]any{"delay_ms": 3600000}, []work.Option{work.In(time.Hour)}
	items[300]["opts"], msgs[300].Options = map[string]any{"priority": "low"}, []work.Option{work.WithPriority(work.PriorityLow)}
	counts := func(q string) string {
		k := work.KeysFor(q)
		s, _ := r.client().XLen(ctx, k.Stream).Result()
		l, _ := r.client().XLen(ctx, k.Low).Result()
		d, _ := r.client().ZCard(ctx, k.Scheduled).Result()
		return fmt.Sprintf("stream %d, low %d, scheduled %d", s, l, d)
	}
	goIDs, err := work.EnqueueMany(ctx, r.client(), "go", msgs)
	var de *work.DuplicateError
	if !errors.As(err, &de) || !reflect.DeepEqual(de.Jobs, []int{11}) || goIDs[11] != goIDs[10] {
		t.Fatalf("go client: %v", err)
	}
	failItems := []map[string]any{{"payload": "a"}, {"payload": "b", "opts": map[string]any{"delay_ms": 3600000}}, {"payload": "c"}}
	r.client().Set(ctx, work.KeysFor("go-fail").Scheduled, "x", 0)
	goFailIDs, goFail := work.EnqueueMany(ctx, r.client(), "go-fail", []work.Message{{Payload: []byte("a")},
		{Payload: []byte("b"), Options: []work.Option{work.In(time.Hour)}}, {Payload: []byte("c")}})
	if goFail == nil || goFailIDs[1] != "" || goFailIDs[2] == "" {
		t.Fatalf("go client, a job that cannot be written: %v %v", goFailIDs, goFail)
	}
	want := counts("go")
	if want != fmt.Sprintf("stream %d, low 1, scheduled 1", n-3) {
		t.Fatalf("go client: %s", want)
	}
	for _, p := range producers[1:] {
		q := string(p)
		if err := r.client().ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		// redis-py's own parser: hiredis, when installed, is the default
		res := r.drive(p, q, map[string]any{"python_parser": true},
			map[string]any{"op": "items", "items": items}, map[string]any{"op": "enqueue", "payload": "one more"})
		ids, _ := res[0]["ids"].([]any)
		if len(ids) != n {
			t.Fatalf("%s: %v", p, res[0])
		}
		last := ""
		for i, v := range ids {
			v := v.(map[string]any)
			id := v["id"].(string)
			if i == 11 {
				if id != ids[10].(map[string]any)["id"] || v["duplicate"] != true {
					t.Errorf("%s: job 12: %v, want job 11's id, a duplicate", p, v)
				}
				continue
			}
			if v["duplicate"] != false || !idAfter(id, last) {
				t.Errorf("%s: job %d: %v after %s", p, i+1, v, last)
			}
			last = id
		}
		if one := res[1]["id"]; one == nil || !idAfter(one.(string), last) {
			t.Errorf("%s: one job after the batch: %v", p, res[1])
		}
		// A job whose writes fail (its scheduled set holds a string) is
		// reported as the Go client reports it; the others are added.
		r.client().Set(ctx, work.KeysFor(q+"-fail").Scheduled, "x", 0)
		fail := r.drive(p, q+"-fail", nil, map[string]any{"op": "items", "items": failItems})[0]
		fids, _ := fail["ids"].([]any)
		wantFail := strings.ReplaceAll(goFail.Error(), "go-fail", q+"-fail")
		if fail["class"] != "EnqueueError" || fail["error"] != wantFail || len(fids) != 3 || fids[0] == nil || fids[1] != nil || fids[2] == nil {
			t.Errorf("%s: a batch whose second job cannot be written: %v, want EnqueueError %q and ids for jobs 1 and 3", p, fail, wantFail)
		}
		got := counts(q)
		msgs, _ := r.client().XLen(ctx, work.KeysFor(q).Stream).Result()
		if got != fmt.Sprintf("stream %d, low 1, scheduled 1", msgs) || msgs != int64(n-3+1) {
			t.Errorf("%s: %s, want as the Go client's (%s) and the one job more", p, got, want)
		}
	}
}
