package work

import (
	"strconv"
	"time"
)

// Totals kept in the stats hash (baton:{q}:stats), so that short-lived
// holders add up to a queue's history. Every field is written by the script
// that settles the job, never by an extra round trip.
const (
	StatDone    = "done"    // jobs acknowledged
	StatRetried = "retried" // failed runs scheduled for a retry
	StatDead    = "dead"    // jobs dead-lettered
	// StatFailedPrefix + a Failed kind: failed runs that were retried, by
	// kind. The last failed run of a job counts under StatDeadPrefix + its
	// reason instead.
	StatFailedPrefix = "failed:"
	StatDeadPrefix   = "dead:" // + reason: jobs dead-lettered, by reason
	// StatDurPrefix + bucket index: jobs done whose handler ran at most
	// DurationBuckets[i] seconds (and more than the bucket before);
	// index len(DurationBuckets) counts the rest. Failed runs have their
	// own histograms, by outcome: DurField and DurSumField name them.
	StatDurPrefix = "dur:"
	StatDurSumUS  = "dur_sum_us" // total handler time of the jobs done, µs
)

// The outcomes of a run the duration histograms are kept by: done, or how
// it failed (FailedError, FailedTimeout, FailedCrashed: a persistent child
// that died mid-job, OutcomeRejected). A run cut short by its holder's death
// has no duration and is in none.
const (
	OutcomeDone     = "done"
	OutcomeRejected = "rejected" // the handler said do not retry (ErrSkipRetry)
)

// Outcomes are the outcomes of DurField, done first.
var Outcomes = []string{OutcomeDone, FailedError, FailedTimeout, FailedCrashed, OutcomeRejected}

// DurField is the stats field of bucket i of outcome's duration histogram:
// dur:<i> for done (as holders before the outcomes wrote it),
// dur:<outcome>:<i> for the others.
func DurField(outcome string, i int) string {
	if outcome == OutcomeDone {
		return durFields[i]
	}
	return StatDurPrefix + outcome + ":" + strconv.Itoa(i)
}

// DurSumField is the stats field of outcome's total handler time, µs:
// dur_sum_us for done, dur_sum_us:<outcome> for the others.
func DurSumField(outcome string) string {
	if outcome == OutcomeDone {
		return StatDurSumUS
	}
	return StatDurSumUS + ":" + outcome
}

// bucket is the index of the duration bucket d falls in.
func bucket(d time.Duration) int {
	s := d.Seconds()
	i := 0
	for i < len(DurationBuckets) && s > DurationBuckets[i] {
		i++
	}
	return i
}

// runPairs appends the stats field/increment pairs that count one run of
// outcome that took d.
func runPairs(args []any, outcome string, d time.Duration) []any {
	return append(args, DurField(outcome, bucket(d)), 1, DurSumField(outcome), d.Microseconds())
}

// The kinds of failed runs counted under StatFailedPrefix.
const (
	FailedError   = "error"   // the handler failed
	FailedTimeout = "timeout" // job_timeout, or a persistent child's silence
	// FailedCrashed: the run never finished because the process running it
	// died: a persistent child that died mid-job, or a holder that died (or
	// was killed at its hard deadline), counted when the job is replayed or
	// claimed. A job read ahead but not yet started when its holder died
	// counts too: the delivery is spent either way.
	FailedCrashed = "crashed"
)

// DurationBuckets are the upper bounds, in seconds, of the job-duration
// histogram kept in Redis. Fixed: holders of different versions must agree.
var DurationBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300}

// durFields are the stats fields of the buckets, built once.
var durFields = func() []string {
	f := make([]string, len(DurationBuckets)+1)
	for i := range f {
		f[i] = StatDurPrefix + strconv.Itoa(i)
	}
	return f
}()

// histogram counts a batch of jobs done, for the ack script.
type histogram struct {
	n     [13]int64 // per bucket; len(DurationBuckets)+1
	sumUS int64
}

func (h *histogram) add(d time.Duration) {
	h.n[bucket(d)]++
	h.sumUS += d.Microseconds()
}

// merge adds o's counts to h and resets o.
func (h *histogram) merge(o *histogram) {
	for i, c := range o.n {
		h.n[i] += c
	}
	h.sumUS += o.sumUS
	*o = histogram{}
}

// fields counts the field/increment pairs pairs will append.
func (h *histogram) fields() int {
	n := 1 // the sum
	for _, c := range h.n {
		if c > 0 {
			n++
		}
	}
	return n
}

// pairs appends the batch's field/increment pairs and resets it.
func (h *histogram) pairs(args []any) ([]any, int) {
	n := 0
	for i, c := range h.n {
		if c > 0 {
			args = append(args, durFields[i], c)
			n++
		}
	}
	args = append(args, StatDurSumUS, h.sumUS)
	*h = histogram{}
	return args, n + 1
}
