package work

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// feedOnce runs keyTakeScript as a holder of consumer c would, then reads
// nothing: the uncapped keys' jobs it names stay undelivered in their
// streams, as when a holder dies between the script and its read. Returns
// how many it named.
func feedOnce(t *testing.T, rdb *redis.Client, c string, n int) int64 {
	t.Helper()
	var fed int64
	for _, f := range takeNames(t, rdb, c, n) {
		fed += f.n
	}
	return fed
}

// named is a key and how many of its jobs a take named.
type named struct {
	key string
	n   int64
}

// takeNames runs keyTakeScript as feedOnce does and returns what it named,
// in turn order.
func takeNames(t *testing.T, rdb *redis.Client, c string, n int) []named {
	t.Helper()
	ctx := context.Background()
	k := KeysFor("q")
	r := &runner{keys: k}
	if err := rdb.XGroupCreateMkStream(ctx, k.Stream, Group, "0").Err(); err != nil && !strings.Contains(err.Error(), "BUSYGROUP") {
		t.Fatal(err)
	}
	v, err := runScript(ctx, rdb, keyTakeScript, r.keyKeys(), Group, c, n, k.keyBase(), 0, "", "").Slice()
	if err != nil {
		t.Fatal(err)
	}
	var out []named
	for _, s := range v[1:] {
		if s, _ := s.([]any); len(s) == 2 && s[0] == "feed" {
			f, _ := s[1].([]any)
			for i := 1; i < len(f); i += 2 {
				s, _ := f[i-1].(string)
				n, _ := f[i].(int64)
				out = append(out, named{s[strings.LastIndexByte(s, ':')+1:], n})
			}
		}
	}
	return out
}

// A read that is full before a key's turn is whole ends there: the key
// goes back to the head of its ring, for a whole turn with the next read,
// not a few jobs now and a turn more later. The first turn of a read is
// never cut: a read smaller than a quantum still reads.
func TestKeyTurnWholeOrNext(t *testing.T) {
	rdb := redistest.Start(t).Client()
	enqueueKeyed(t, rdb, "a", 10)
	enqueueKeyed(t, rdb, "b", 10)
	// 15: a quantum of 4; a, b, a, then b's turn would be 3 of 4
	if got, want := takeNames(t, rdb, "h/run-0", 15), []named{{"a", 4}, {"b", 4}, {"a", 4}}; !slices.Equal(got, want) {
		t.Fatalf("named %v, want %v", got, want)
	}
	if got, want := takeNames(t, rdb, "h/run-0", 15), []named{{"b", 4}, {"a", 4}, {"b", 4}}; !slices.Equal(got, want) {
		t.Fatalf("then named %v, want %v (b first)", got, want)
	}
	if got, want := takeNames(t, rdb, "h/run-0", 2), []named{{"a", 2}}; !slices.Equal(got, want) {
		t.Fatalf("a read of 2 named %v, want %v", got, want)
	}
	// Jobs without a key fill all but 1 of the read: the first key still
	// takes its turn in that 1 (a steady flow of them must not starve keys).
	for range 14 {
		if _, err := Enqueue(context.Background(), rdb, "q", []byte("plain")); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := takeNames(t, rdb, "h/run-0", 15), []named{{"b", 1}}; !slices.Equal(got, want) {
		t.Fatalf("beside 14 jobs without a key, named %v, want %v", got, want)
	}
}

// The jobs a key's turn fed to the stream and nobody read (the holder died
// between the script and its read) are read by the next holder like any
// new entry and run once each, keys and payloads intact; with a cap in the
// reader's config (holders that disagree), they wait for permits and run
// within it.
func TestKeyFedLeftUndelivered(t *testing.T) {
	for _, capped := range []bool{false, true} {
		name := "uncapped reader"
		if capped {
			name = "capped reader"
		}
		t.Run(name, func(t *testing.T) {
			rdb := redistest.Start(t).Client()
			ids := append(enqueueKeyed(t, rdb, "a", 12), enqueueKeyed(t, rdb, "b", 12)...)
			if fed := feedOnce(t, rdb, "gone/run-0", 12); fed != 12 {
				t.Fatalf("fed %d jobs, want 12", fed)
			}
			var mu sync.Mutex
			ran := map[string]int{}
			var cc capCounter
			st := new(Stats)
			c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
				cc.enter(j.Key)
				defer cc.leave(j.Key)
				if !strings.HasPrefix(string(j.Payload), j.Key+"-") {
					t.Errorf("job %s of key %q has payload %q", j.ID, j.Key, j.Payload)
				}
				mu.Lock()
				ran[j.ID]++
				mu.Unlock()
				return nil
			}))
			c.Concurrency = 4
			if capped {
				c.KeyCaps = KeyCaps{Default: 1}
			}
			runUntil(t, c, st, func() bool { return st.Done.Load() == 24 })
			for _, id := range ids {
				if ran[id] != 1 {
					t.Errorf("job %s ran %d times", id, ran[id])
				}
			}
			if capped && (cc.most["a"] > 1 || cc.most["b"] > 1) {
				t.Errorf("most running at once: %v; want at most 1 per key", cc.most)
			}
			levelsSettled(t, rdb)
			keysClean(t, rdb)
		})
	}
}

// A holder whose keys have no cap reads keyed and unkeyed jobs of the
// normal level in one round trip: jobs without a key already in the stream
// are read first (no key's job is fed while any waits there), and every job
// runs once.
func TestKeyPipedMixedQueue(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	var plain []string
	for range 60 {
		id, err := Enqueue(ctx, rdb, "q", []byte("plain"))
		if err != nil {
			t.Fatal(err)
		}
		plain = append(plain, id)
	}
	keyed := append(enqueueKeyed(t, rdb, "a", 50), enqueueKeyed(t, rdb, "b", 50)...)
	order := runEachOnce(t, rdb, append(plain, keyed...))
	for i, k := range order[:60] {
		if k != "" {
			t.Fatalf("run %d was key %q's job, before all jobs without a key (order %q)", i+1, k, order)
		}
	}
	levelsSettled(t, rdb)
	keysClean(t, rdb)
}

// Uncapped keyed jobs of high priority, while only the normal level's
// stream exists: the one-round-trip read hands over to the two-step read
// (the script says "levels") and high runs before normal.
func TestKeyPipedHighLevel(t *testing.T) {
	rdb := redistest.Start(t).Client()
	normal := enqueueKeyed(t, rdb, "n", 30)
	high := enqueueKeyed(t, rdb, "h", 30, WithPriority(PriorityHigh))
	order := runEachOnce(t, rdb, append(normal, high...))
	for i, k := range order[:30] {
		if k != "h" {
			t.Fatalf("run %d was key %q's job, before every high one (order %q)", i+1, k, order)
		}
	}
	levelsSettled(t, rdb)
	keysClean(t, rdb)
}

// runEachOnce runs one holder (testConfig) until the jobs ids are done,
// checks that each ran once, and returns the keys of the jobs in the order
// they ran.
func runEachOnce(t *testing.T, rdb *redis.Client, ids []string) []string {
	t.Helper()
	var mu sync.Mutex
	var order []string
	ran := map[string]int{}
	st := new(Stats)
	c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		mu.Lock()
		order = append(order, j.Key)
		ran[j.ID]++
		mu.Unlock()
		return nil
	}))
	runUntil(t, c, st, func() bool { return st.Done.Load() == int64(len(ids)) })
	for _, id := range ids {
		if ran[id] != 1 {
			t.Errorf("job %s ran %d times", id, ran[id])
		}
	}
	return order
}

// A key stream named for a read is deleted before the read (its jobs all
// settled by other holders): XREADGROUP checks every stream first, so the
// read of the streams named with it reads nothing; they are read again one
// by one, and the deleted one is no error.
func TestKeyFedStreamGone(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	k := KeysFor("q")
	ids := enqueueKeyed(t, rdb, "a", 3)
	r := &runner{keys: k, c: Config{Client: rdb, Consumer: "h/run-0", Queue: "q"}}
	jobs, err := r.readFed(ctx, []any{k.KeyStream(PriorityNormal, "gone"), int64(2), k.KeyStream(PriorityNormal, "a"), int64(2)})
	if err != nil || len(jobs) != 2 || jobs[0].ID != ids[0] || jobs[1].ID != ids[1] {
		t.Fatalf("read %v, error %v; want a's first two jobs and no error", jobs, err)
	}
	if n := keyPending(t, rdb, "q"); n != 2 {
		t.Fatalf("%d entries pending, want the 2 read", n)
	}
	if !rdb.SIsMember(ctx, k.keyRingIn(PriorityNormal), "a").Val() {
		t.Fatal("key a left its ring")
	}
	// the slot's next holder runs the two read (its replay) and the third
	runEachOnce(t, rdb, ids)
	levelsSettled(t, rdb)
	keysClean(t, rdb)
}

// A run of pipelined reads, each smaller than the one before or cut short
// of a key's count, plans no more than one read ahead: the turns name only
// what fits beside what the last read left (a plan that grew with every
// read named keys further and further behind their turn, whose streams
// other reads had emptied and deleted by then). Every job is read once.
func TestKeyPlanStaysOneReadAhead(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	var msgs []Message
	for i := range 3000 {
		msgs = append(msgs, Message{Payload: []byte("p"), Options: []Option{Key("k" + strconv.Itoa(i%100))}})
	}
	if _, err := EnqueueMany(ctx, rdb, "q", msgs); err != nil {
		t.Fatal(err)
	}
	r := &runner{keys: KeysFor("q"), c: Config{Client: rdb, Consumer: "h/run-0", Queue: "q"}}
	if err := keyTakeScript.Load(ctx, rdb).Err(); err != nil { // else the first read asks for takeKeyed's two steps
		t.Fatal(err)
	}
	seen := map[string]bool{}
	sizes := []int64{90, 70, 50, 37, 33}
	for i := 0; len(seen) < len(msgs); i++ {
		if i > 1000 {
			t.Fatalf("%d of %d jobs read after 1000 reads", len(seen), len(msgs))
		}
		n := sizes[i%len(sizes)]
		jobs, _, again, err := r.takePiped(ctx, n)
		if err != nil || again {
			t.Fatalf("read %d: %v, again %v", i, err, again)
		}
		if int64(len(jobs)) > n {
			t.Fatalf("read %d of %d: %d jobs", i, n, len(jobs))
		}
		if p := fedCount(r.kk.plan); p > n {
			t.Fatalf("read %d of %d plans %d jobs ahead", i, n, p)
		}
		for _, j := range jobs {
			if seen[j.ID] {
				t.Fatalf("job %s read twice", j.ID)
			}
			seen[j.ID] = true
		}
	}
}

// A drain's tail: many keys read whole still wait in the ring for the turn
// that finds them empty, ahead of a key with jobs. One read sweeps past
// them (more than one take's n + 32 keys) and brings that key's jobs, not
// nothing and a keyPoll wait per n + 32 keys.
func TestKeySweepsDrainedKeysInOneRead(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	var msgs []Message
	for i := range 300 {
		msgs = append(msgs, Message{Payload: []byte("p"), Options: []Option{Key("k" + strconv.Itoa(i))}})
	}
	if _, err := EnqueueMany(ctx, rdb, "q", msgs); err != nil {
		t.Fatal(err)
	}
	r := &runner{keys: KeysFor("q"), c: Config{Client: rdb, Consumer: "h/run-0", Queue: "q"}}
	if err := keyTakeScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	for read := 0; read < 300; {
		jobs, _, _, err := r.takePiped(ctx, 300-int64(read))
		if err != nil || len(jobs) == 0 {
			t.Fatalf("after %d jobs: %d read, %v", read, len(jobs), err)
		}
		read += len(jobs)
	}
	if n := rdb.LLen(ctx, r.keys.KeyRing(PriorityNormal)).Val(); n < 100 {
		t.Fatalf("%d keys still in the ring, want the drained ones (at least 100) for this test", n)
	}
	ids := enqueueKeyed(t, rdb, "z", 5)
	jobs, _, _, err := r.takePiped(ctx, 40)
	if err != nil || len(jobs) != len(ids) {
		t.Fatalf("read %d jobs, %v; want z's %d", len(jobs), err, len(ids))
	}
}
