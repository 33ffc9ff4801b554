package work

import (
	"context"
	"maps"
	"strings"
	"testing"

	"github.com/baton-run/baton/internal/redistest"
)

// decodeRecord reads the records both writers make: appendFields (enqueue)
// and cmsgpack.pack of a Lua table of strings (a job parked back in its
// key's list), short and long strings alike; anything else is refused.
func TestKeyRecordDecode(t *testing.T) {
	long := strings.Repeat("x", 70000)
	want := map[string]any{"payload": long, "key": "k", "orig": "1-0", "attempts": "2", "mid": strings.Repeat("m", 300), "e": ""}
	var o jobOptions
	o.key = "k"
	rec := appendArrayHeader(nil, o.fields()+8)
	rec = appendFields(rec, []byte(long), &o)
	for _, s := range []string{"orig", "1-0", "attempts", "2", "mid", want["mid"].(string), "e", ""} {
		rec = appendPackedString(rec, s)
	}
	if got, ok := decodeRecord(string(rec)); !ok || !maps.Equal(got, want) {
		t.Fatalf("Go record: %v %v", ok, len(got))
	}
	rdb := redistest.Start(t).Client()
	packed, err := rdb.Eval(context.Background(), `return cmsgpack.pack(ARGV)`, nil,
		"payload", long, "key", "k", "orig", "1-0", "attempts", "2", "mid", want["mid"], "e", "").Text()
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := decodeRecord(packed); !ok || !maps.Equal(got, want) {
		t.Fatalf("cmsgpack record: %v %v", ok, got["key"])
	}
	for _, bad := range []string{"", "\x91\xa1a", "\x92\xa1a\x01", "\x92\xa1a\xa5ab", "\x92\xa1a\xa1bX", "\xc0"} {
		if _, ok := decodeRecord(bad); ok {
			t.Errorf("decodeRecord(%q) accepted", bad)
		}
	}
}
