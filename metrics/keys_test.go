package metrics

import (
	"context"
	"fmt"
	"testing"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/work"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Keyed jobs are counted as totals per queue: 300 keys give 2 series, not
// one per key.
func TestMetricsKeys(t *testing.T) {
	rdb := redistest.Start(t).Client()
	var msgs []work.Message
	for i := range 300 {
		msgs = append(msgs, work.Message{Payload: []byte("x"), Options: []work.Option{work.Key(fmt.Sprint("k", i))}})
	}
	msgs = append(msgs, work.Message{Payload: []byte("x"), Options: []work.Option{work.Key("k0"), work.WithPriority(work.PriorityHigh)}})
	if _, err := work.EnqueueMany(context.Background(), rdb, "q", msgs); err != nil {
		t.Fatal(err)
	}
	m := scrapeWant(t, rdb, map[string]float64{
		`baton_keyed_jobs_waiting{queue="q"}`:             301,
		`baton_jobs{queue="q",state="waiting"}`:           301,
		`baton_keys_waiting{priority="normal",queue="q"}`: 300,
		`baton_keys_waiting{priority="high",queue="q"}`:   1,
		`baton_keys_waiting{priority="low",queue="q"}`:    0,
	})
	n := 0
	for name := range m {
		if len(name) > len("baton_keys") && name[:len("baton_keys")] == "baton_keys" {
			n++
		}
	}
	if n != 3 {
		t.Errorf("%d baton_keys* series, want 3 (one per priority)", n)
	}
}

// scrapeWant scrapes queue q's collector and checks the series in want.
func scrapeWant(t *testing.T, rdb *redis.Client, want map[string]float64) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(rdb, Queue{Name: "q"}))
	m := scrape(t, reg)
	for name, w := range want {
		if m[name] != w {
			t.Errorf("%s = %v, want %v", name, m[name], w)
		}
	}
	return m
}
