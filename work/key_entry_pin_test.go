package work

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
)

// A keyed job enters the stream in the record form (orig, record), moved
// with a permit (a capped key) or fed (an uncapped one). Wherever it goes
// next its fields are the job's own, never the record: its dead letter,
// its retry record, and its cancel while it runs (the permit returns: the
// key's next job runs).
func TestKeyRecordEntrySettles(t *testing.T) {
	for name, caps := range map[string]KeyCaps{
		"capped":   {Default: 1},
		"uncapped": {},
	} {
		t.Run(name, func(t *testing.T) {
			rdb := redistest.Start(t).Client()
			ctx := context.Background()
			k := KeysFor("q")
			dead := enqueueKeyed(t, rdb, "d", 1)[0]
			retried := enqueueKeyed(t, rdb, "r", 1, MaxAttempts(3))[0]
			stop := enqueueKeyed(t, rdb, "c", 2)
			running := make(chan struct{}, 1)
			var mu sync.Mutex
			var ran []string
			c := testConfig(rdb, HandlerFunc(func(jctx context.Context, j *Job) error {
				mu.Lock()
				ran = append(ran, j.ID)
				mu.Unlock()
				if want := fmt.Sprintf("%s-", j.Key); string(j.Payload[:len(want)]) != want {
					t.Errorf("job %s of key %q has payload %q", j.ID, j.Key, j.Payload)
				}
				switch j.ID {
				case dead:
					return fmt.Errorf("bad: %w", ErrSkipRetry)
				case retried:
					return errors.New("fails once")
				case stop[0]:
					running <- struct{}{}
					<-jctx.Done()
					return context.Cause(jctx)
				}
				return nil
			}))
			c.KeyCaps, c.RetryBackoff, c.RetryBackoffMax = caps, time.Hour, time.Hour
			st := runFor(t, c)
			select {
			case <-running:
			case <-time.After(30 * time.Second):
				t.Fatal("key c's first job never ran")
			}
			res, err := Cancel(ctx, rdb, "q", stop[0])
			if err != nil || len(res) != 1 || res[0].Outcome != CancelRequested {
				t.Fatalf("cancel of a running keyed job: %+v, %v", res, err)
			}
			waitFor(t, "the cancel, the dead letter, the retry and key c's next job", func() bool {
				loc, _ := Locate(ctx, rdb, "q", retried)
				return st.Dead.Load() == 2 && st.Done.Load() == 1 && loc != nil && loc.State == StateRetrying
			})
			for id, reason := range map[string]string{dead: ReasonRejected, stop[0]: ReasonCancelled} {
				d, err := GetDead(ctx, rdb, "q", id)
				if err != nil {
					t.Fatal(err)
				}
				if d.Reason != reason || d.JobID != id || len(d.Payload) == 0 || d.Fields[keyField] == "" || d.Fields[recordField] != "" {
					t.Errorf("dead letter of %s: %+v; want reason %s, its payload, its key, no record", id, d, reason)
				}
			}
			for f, want := range map[string]string{keyField: "r", PayloadField: "r-0", maxAttemptsField: "3", attemptsField: "1", recordField: ""} {
				got, _ := runScript(ctx, rdb, recordFieldScript, []string{k.RetryJobs}, retried, f).Text()
				if got != want {
					t.Errorf("retry record of %s: %s = %q, want %q", retried, f, got, want)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(ran) != 4 || !slices.Contains(ran, stop[1]) {
				t.Errorf("ran %v; want each job once, key c's second too", ran)
			}
		})
	}
}
