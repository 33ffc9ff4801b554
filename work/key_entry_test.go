package work

import (
	"context"
	"testing"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A producer's raw entry in the form the keys' take script writes (orig,
// record) whose record is not one array of field and value strings naming
// that same job is dead-lettered as malformed, its record kept as it was,
// never run and never a script error: nothing is left pending, and the jobs
// behind it run.
func TestKeyRecordEntryMalformed(t *testing.T) {
	bad := map[string]string{
		"not msgpack":    "\xff\x00zz",
		"a nil inside":   "\x94\xa7payload\xc0\xa1b\xa1c",
		"a map":          "\x82\xa7payload\xa1x\xa4orig\xa31-1",
		"empty":          "\x90",
		"two objects":    "\x94\xa7payload\xa1x\xa4orig\xa31-1\x92\xa1a\xa1b",
		"a number":       "\x94\xa7payload\x01\xa4orig\xa31-1",
		"another orig":   "\x94\xa7payload\xa1x\xa4orig\xa31-2",
		"no orig inside": "\x92\xa7payload\xa1x",
	}
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	if err := EnsureGroup(ctx, rdb, KeysFor("q")); err != nil {
		t.Fatal(err)
	}
	entries := map[string]string{} // entry id → its record
	for _, rec := range bad {
		id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: KeysFor("q").Stream, Values: []any{"orig", "1-1", "record", rec}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		entries[id] = rec
	}
	enqueue(t, rdb, "q", 3)
	st := new(Stats)
	c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		if string(j.Payload) == "x" {
			t.Errorf("a malformed record ran: %s", j.Entry)
		}
		return nil
	}))
	c.KeyCaps = KeyCaps{Default: 2}
	runUntil(t, c, st, func() bool { return st.Dead.Load() == int64(len(bad)) && st.Done.Load() == 3 })
	letters, err := ListDead(ctx, rdb, "q", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range letters {
		rec, ok := entries[d.Entry]
		if !ok || d.Reason != ReasonMalformed || d.Fields[recordField] != rec || len(d.Payload) != 0 {
			t.Errorf("dead letter %+v: want the entry's record kept, as malformed, no payload", d)
		}
		delete(entries, d.Entry)
	}
	if len(entries) > 0 {
		t.Errorf("entries with no dead letter: %q", entries)
	}
	settled(t, rdb, "q")
}
