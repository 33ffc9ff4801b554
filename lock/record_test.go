package lock

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// A record's activity (the holder's keys) round-trips at the top level of
// its JSON: records of older versions, with jobs_done and job among lock's
// own keys, read the same, and a record written now reads the same in them.
func TestRecordActivityAtTopLevel(t *testing.T) {
	old := `{"slot":1,"held":true,"pid":42,"role":"run","since":"2026-01-02T03:04:05Z","jobs_done":7,"job":"1-0","draining":true,` +
		`"children":[{"pid":43,"jobs":2,"rss_bytes":100}]}`
	var r Record
	if err := json.Unmarshal([]byte(old), &r); err != nil {
		t.Fatal(err)
	}
	if r.Slot != 1 || !r.Held || r.PID != 42 || !r.Since.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("lock's fields: %+v", r)
	}
	var act map[string]any
	if err := json.Unmarshal(r.Activity, &act); err != nil {
		t.Fatal(err)
	}
	if len(act) != 4 || act["jobs_done"] != 7.0 || act["job"] != "1-0" || act["draining"] != true {
		t.Fatalf("activity %s", r.Activity)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var was, now map[string]any
	_ = json.Unmarshal([]byte(old), &was)
	if err := json.Unmarshal(b, &now); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(was, now) {
		t.Fatalf("written back:\n%s\nwant the keys of\n%s", b, old)
	}
	if _, err := json.Marshal(Record{Activity: json.RawMessage(`[1]`)}); err == nil {
		t.Fatal("an activity that is not an object was written")
	}
	if b, err := json.Marshal(Record{Slot: 2}); err != nil || string(b) != `{"slot":2,"held":false}` {
		t.Fatalf("no activity: %s %v", b, err)
	}
}
