// Package metrics exposes baton's queues as Prometheus metrics, read from
// Redis and the slot records at scrape time. Holders live minutes, so
// "scrape the worker" does not fit: the history (totals, the job-duration
// histogram) is kept in Redis by the scripts that settle jobs, and a
// collector reads it, with the queue's current state, whenever asked.
//
// Most callers need NewCollector and a registry:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(metrics.NewCollector(rdb, metrics.Queue{Name: "thumbs", Run: run, Standby: sb, Keep: 4}))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// It only reads: it never takes a slot, never writes to Redis. Labels are
// bounded: queue, slot index, reason, kind, outcome, state, periodic entry
// name (the entries of the config), host; never job ids.
package metrics

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/baton-run/baton/history"
	"github.com/baton-run/baton/internal/cronfire"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/periodic"
	"github.com/baton-run/baton/work"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/redis/go-redis/v9"
)

// Queue is one queue to expose. Run and Standby may be nil (no slot metrics,
// e.g. where the lock dir is not visible); Keep is k, the holders to keep.
type Queue struct {
	Name         string
	Run, Standby lock.Set
	Keep         int
}

// Collector is a prometheus.Collector for baton queues.
type Collector struct {
	rdb     redis.Cmdable
	queues  []Queue
	timeout time.Duration
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector of queues on rdb; each scrape reads
// Redis with a timeout of 5s.
func NewCollector(rdb redis.Cmdable, queues ...Queue) *Collector {
	return &Collector{rdb: rdb, queues: queues, timeout: 5 * time.Second}
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("baton_"+name, help, append([]string{"queue"}, labels...), nil)
}

var (
	up          = desc("up", "1 when the queue's Redis answered this scrape, else 0.")
	paused      = desc("queue_paused", "1 while the queue is paused (baton pause): no holder starts a job; running jobs finish.")
	jobs        = desc("jobs", "Jobs by where they are now: waiting, pending (running or left by a dead holder), scheduled, retrying, dead, blocked (enqueued after jobs not yet done).", "state")
	oldest      = desc("oldest_waiting_seconds", "How long the oldest waiting job has waited (0 when none waits).")
	done        = desc("jobs_done_total", "Jobs acknowledged, all time.")
	retried     = desc("jobs_retried_total", "Failed runs scheduled for a retry, all time.")
	failed      = desc("job_runs_failed_total", "Failed runs by kind (error, timeout, crashed, rejected), all time.", "kind")
	dead        = desc("jobs_dead_total", "Jobs dead-lettered, by reason, all time.", "reason")
	duration    = desc("job_duration_seconds", "Handler time of every run that ended, by outcome (done; failed: error, timeout, crashed, rejected), all time.", "outcome")
	slotsHeld   = desc("slots_held", "Slots held now, by role (run, standby).", "role")
	slotsKept   = desc("slots_kept", "k: the run slots to keep covered.")
	holderAge   = desc("holder_age_seconds", "How long each run slot's holder has held it.", "slot")
	overdue     = desc("holder_overdue", "1 when a run slot's holder is past its hard deadline (frozen or stuck) and will be killed.", "slot")
	noRecord    = desc("holder_record_missing", "1 when a run slot is locked but its holder's record cannot be read (a full disk?).", "slot")
	memUsed     = desc("redis_memory_used_bytes", "Redis used_memory.")
	memMax      = desc("redis_maxmemory_bytes", "Redis maxmemory (0: no limit).")
	leaseLeft   = desc("lease_seconds_left", "Fleet mode: time left on each held run lease, on Redis' clock. Renewed every lease_renew, it stays near lease_ttl; lower, renewals were missed (a frozen or cut-off holder); below a third of lease_ttl its holder is past its renew deadline and has fenced itself.", "slot")
	belowK      = desc("below_k_seconds_total", "Time during which fewer than k run slots were held, all time, as holders and standbys recorded it.")
	lastTick    = desc("periodic_last_tick_timestamp_seconds", "The last tick claimed of each [[periodic]] entry (enqueued, missed or skipped), as a Unix time: the scheduled time, not when it was claimed.", "entry")
	ticks       = desc("periodic_ticks_total", "Ticks of each [[periodic]] entry claimed, by outcome: enqueued, missed (too late for its catch_up), skipped (overlap = \"skip\"), all time.", "entry", "outcome")
	cronFire    = desc("cron_last_fire_timestamp_seconds", "The last time cron started baton run on each host, as a Unix time, as the host's holders published it (within a second). Silent past 2 C + a margin: cron stopped there.", "host")
	gaps        = desc("slot_gap_seconds", "Gaps between a kept run slot's holders: from one's leave (or death) to the next's take, by who took it (standby, candidate), all time.", "by")
	reasons     = []string{work.ReasonFailed, work.ReasonTimeout, work.ReasonCrashed, work.ReasonTooLarge, work.ReasonMalformed, work.ReasonRejected, work.ReasonCancelled, work.ReasonDependencyFailed}
	allDescs    = []*prometheus.Desc{up, paused, jobs, oldest, done, retried, failed, dead, duration, slotsHeld, slotsKept, holderAge, overdue, noRecord, leaseLeft, memUsed, memMax, belowK, gaps, lastTick, ticks, cronFire}
	failedKinds = map[string][]string{ // kind → stats fields that add up to it
		work.FailedError:   {work.StatFailedPrefix + work.FailedError, work.StatDeadPrefix + work.ReasonFailed},
		work.FailedTimeout: {work.StatFailedPrefix + work.FailedTimeout, work.StatDeadPrefix + work.ReasonTimeout},
		work.FailedCrashed: {work.StatFailedPrefix + work.FailedCrashed, work.StatDeadPrefix + work.ReasonCrashed},
		"rejected":         {work.StatDeadPrefix + work.ReasonRejected},
	}
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector: one read of each queue.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var mem *work.Memory
	_, cluster := c.rdb.(*redis.ClusterClient) // each queue's master, its own memory
	for _, q := range c.queues {
		c.slots(ch, q)
		counts, err := work.ReadCounts(ctx, c.rdb, q.Name)
		if err != nil {
			ch <- gauge(up, 0, q.Name)
			continue
		}
		ch <- gauge(up, 1, q.Name)
		c.queue(ch, q.Name, counts)
		keyMetrics(ctx, c.rdb, ch, q.Name, counts)
		if cov, err := history.ReadCoverage(ctx, c.rdb, q.Name, q.Keep, counts.Stats); err == nil {
			coverage(ch, q.Name, cov)
		}
		if fires, err := cronfire.Read(ctx, c.rdb, q.Name, 0); err == nil {
			for _, f := range fires {
				ch <- gauge(cronFire, float64(f.Last.UnixMilli())/1000, q.Name, f.Host)
			}
		}
		if pc, err := periodic.ReadCounts(ctx, c.rdb, q.Name); err == nil {
			for name, n := range pc {
				if !n.LastTick.IsZero() {
					ch <- gauge(lastTick, float64(n.LastTick.UnixMilli())/1000, q.Name, name)
				}
				for outcome, v := range n.Ticks {
					ch <- counter(ticks, v, q.Name, name, outcome)
				}
			}
		}
		if mem == nil || cluster {
			if m, err := work.ReadMemory(ctx, c.rdb, q.Name); err == nil {
				mem = &m
				ch <- gauge(memUsed, float64(m.Used), q.Name)
				ch <- gauge(memMax, float64(m.Max), q.Name)
			}
		}
	}
}

func (c *Collector) queue(ch chan<- prometheus.Metric, q string, n *work.Counts) {
	for state, v := range map[string]int64{
		work.StateWaiting: n.Waiting, "pending": n.Pending, work.StateScheduled: n.Scheduled,
		work.StateRetrying: n.Retrying, work.StateDead: n.Dead, work.StateBlocked: n.Blocked,
	} {
		ch <- gauge(jobs, float64(v), q, state)
	}
	ch <- gauge(oldest, n.OldestWaiting.Seconds(), q)
	ch <- gauge(paused, b2f(n.Paused != nil), q)
	ch <- counter(done, n.Stats[work.StatDone], q)
	ch <- counter(retried, n.Stats[work.StatRetried], q)
	for kind, fields := range failedKinds {
		var v int64
		for _, f := range fields {
			v += n.Stats[f]
		}
		ch <- counter(failed, v, q, kind)
	}
	for _, r := range reasons {
		ch <- counter(dead, n.Stats[work.StatDeadPrefix+r], q, r)
	}
	for _, o := range work.Outcomes { // empty ones too, so that rate() sees them from zero
		buckets := make(map[float64]uint64, len(work.DurationBuckets))
		var cum uint64
		for i, le := range work.DurationBuckets {
			cum += uint64(n.Stats[work.DurField(o, i)])
			buckets[le] = cum
		}
		count := cum + uint64(n.Stats[work.DurField(o, len(work.DurationBuckets))])
		sum := float64(n.Stats[work.DurSumField(o)]) / 1e6
		ch <- prometheus.MustNewConstHistogram(duration, count, sum, buckets, q, o)
	}
}

// coverage sends the time below k and the gap histograms (empty ones too,
// so that rate() sees them from zero).
func coverage(ch chan<- prometheus.Metric, q string, cov *history.Coverage) {
	ch <- prometheus.MustNewConstMetric(belowK, prometheus.CounterValue, cov.BelowK.Seconds(), q)
	for _, by := range []string{history.ByStandby, history.ByCandidate} {
		g := cov.Gaps[by]
		buckets := make(map[float64]uint64, len(history.GapBuckets))
		var cum uint64
		for i, le := range history.GapBuckets {
			if i < len(g.Buckets) {
				cum += uint64(g.Buckets[i])
			}
			buckets[le] = cum
		}
		ch <- prometheus.MustNewConstHistogram(gaps, uint64(g.Count), g.Sum.Seconds(), buckets, q, by)
	}
}

func (c *Collector) slots(ch chan<- prometheus.Metric, q Queue) {
	if q.Run == nil {
		return
	}
	ch <- gauge(slotsKept, float64(q.Keep), q.Name)
	now := time.Now()
	for role, set := range map[string]lock.Set{lock.RoleRun: q.Run, lock.RoleStandby: q.Standby} {
		if set == nil {
			ch <- gauge(slotsHeld, 0, q.Name, role)
			continue
		}
		recs, err := set.Records()
		if err != nil {
			continue
		}
		held := 0
		for _, r := range recs {
			if !r.Held {
				continue
			}
			held++
			if role != lock.RoleRun {
				continue
			}
			slot := strconv.Itoa(r.Slot)
			if !r.Since.IsZero() {
				ch <- gauge(holderAge, now.Sub(r.Since).Seconds(), q.Name, slot)
			}
			ch <- gauge(overdue, b2f(r.Overdue(now, 0)), q.Name, slot)
			ch <- gauge(noRecord, b2f(r.NoRecord), q.Name, slot)
			if r.ExpiresIn > 0 { // a lease
				ch <- gauge(leaseLeft, r.ExpiresIn.Seconds(), q.Name, slot)
			}
		}
		ch <- gauge(slotsHeld, float64(held), q.Name, role)
	}
}

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counter(d *prometheus.Desc, v int64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Write writes the collector's metrics to w in the text exposition.
func Write(w io.Writer, c *Collector) error {
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		return err
	}
	mfs, err := reg.Gather()
	if err != nil {
		return err
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return err
		}
	}
	return nil
}

// WriteFile writes the collector's metrics to path in the text exposition,
// atomically: to a temporary file in the same directory, then renamed over
// path, so a reader (node_exporter's textfile collector) never sees half.
func WriteFile(path string, c *Collector) error {
	var buf bytes.Buffer
	if err := Write(&buf, c); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
