package metrics

import (
	"context"

	"github.com/baton-run/baton/work"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Keys' metrics: totals per queue, never a label per key (a queue may have
// any number of keys; status shows the busiest).
var (
	keyedWaiting = desc("keyed_jobs_waiting", "Jobs waiting in their keys' streams (enqueued with a key), counted in baton_jobs{state=\"waiting\"} too; read from at most 10,000 key streams per scrape.")
	keysWaiting  = desc("keys_waiting", "Keys with jobs waiting for their turn, by priority (high, normal, low): the lengths of the rings holders take turns over.", "priority")
)

func init() { allDescs = append(allDescs, keyedWaiting, keysWaiting) }

// keyMetrics sends the keys' totals: the keyed jobs from n, the keys with
// waiting jobs from one pipeline of three LLEN.
func keyMetrics(ctx context.Context, rdb redis.Cmdable, ch chan<- prometheus.Metric, q string, n *work.Counts) {
	ch <- gauge(keyedWaiting, float64(n.Keyed), q)
	k := work.KeysFor(q)
	levels := []work.Priority{work.PriorityHigh, work.PriorityNormal, work.PriorityLow}
	var lens [3]*redis.IntCmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, l := range levels {
			lens[i] = p.LLen(ctx, k.KeyRing(l))
		}
		return nil
	})
	if err != nil {
		return
	}
	for i, l := range levels {
		ch <- gauge(keysWaiting, float64(lens[i].Val()), q, l.String())
	}
}
