package metrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/history"
	"github.com/baton-run/baton/internal/proc"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/work"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rs/zerolog"
)

// Known work, then every metric read back from the text exposition as a
// Prometheus server would parse it.
func TestMetricsAgainstKnownWork(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	var msgs []work.Message
	for i := 0; i < 100; i++ {
		msgs = append(msgs, work.Message{Payload: []byte(fmt.Sprintf("ok-%d", i))})
	}
	for i := 0; i < 3; i++ {
		msgs = append(msgs, work.Message{Payload: []byte("dies"), Options: []work.Option{work.MaxAttempts(1)}})
	}
	msgs = append(msgs, work.Message{Payload: []byte("flaky")}, work.Message{Payload: []byte("later"), Options: []work.Option{work.In(time.Hour)}},
		work.Message{Payload: []byte("slow"), Options: []work.Option{work.MaxAttempts(1), work.Timeout(50 * time.Millisecond)}},
		work.Message{Payload: []byte("reject")})
	if _, err := work.EnqueueMany(ctx, rdb, "q", msgs); err != nil {
		t.Fatal(err)
	}
	var flaky atomic.Int64
	h := work.HandlerFunc(func(ctx context.Context, j *work.Job) error {
		time.Sleep(2 * time.Millisecond)
		switch string(j.Payload) {
		case "dies":
			return errors.New("no")
		case "flaky":
			if flaky.Add(1) == 1 {
				return errors.New("once")
			}
		case "slow":
			<-ctx.Done()
			return ctx.Err()
		case "reject":
			return fmt.Errorf("bad input: %w", work.ErrSkipRetry)
		}
		return nil
	})
	st := new(work.Stats)
	rctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		errc <- work.Run(rctx, work.Config{Client: rdb, Queue: "q", Consumer: "h/run-0", Handler: h, Logger: zerolog.Nop(),
			RetryBackoff: 10 * time.Millisecond, RetryBackoffMax: 20 * time.Millisecond}, st)
	}()
	for end := time.Now().Add(30 * time.Second); st.Done.Load() < 101 || st.Dead.Load() < 5; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("done %d dead %d", st.Done.Load(), st.Dead.Load())
		}
	}
	cancel()
	<-errc
	// The durations go to the stats hash, never into the letters.
	letters, err := rdb.XRange(ctx, work.KeysFor("q").Dead, "-", "+").Result()
	if err != nil || len(letters) != 5 {
		t.Fatalf("dead letters: %d, %v", len(letters), err)
	}
	for _, l := range letters {
		for f := range l.Values {
			if strings.HasPrefix(f, "dur") {
				t.Fatalf("dead letter %v holds %s", l.Values, f)
			}
		}
		if l.Values["reason"] == nil || l.Values["orig"] == nil {
			t.Fatalf("dead letter %v: no reason or job id", l.Values)
		}
	}

	// A held run slot, as a holder would have.
	dir := t.TempDir()
	run, _ := lock.NewFileSet(dir, "q", lock.RoleRun, 2)
	slot, ok, err := run.TryAcquire()
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	defer slot.Release()
	now := time.Now()
	start, err := proc.StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if err := slot.Publish(lock.Record{PID: os.Getpid(), Start: start, Since: now.Add(-time.Minute), Until: now.Add(time.Minute), Deadline: now.Add(2 * time.Minute)}); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(rdb, Queue{Name: "q", Run: run, Keep: 2}))
	families := scrape(t, reg)
	want := map[string]float64{
		`baton_up{queue="q"}`:                                    1,
		`baton_jobs_done_total{queue="q"}`:                       101,
		`baton_jobs_retried_total{queue="q"}`:                    1,
		`baton_job_runs_failed_total{kind="error",queue="q"}`:    4,
		`baton_job_runs_failed_total{kind="timeout",queue="q"}`:  1,
		`baton_job_runs_failed_total{kind="rejected",queue="q"}`: 1,
		`baton_job_runs_failed_total{kind="crashed",queue="q"}`:  0,
		`baton_jobs_dead_total{queue="q",reason="failed"}`:       3,
		`baton_jobs_dead_total{queue="q",reason="timeout"}`:      1,
		`baton_jobs_dead_total{queue="q",reason="rejected"}`:     1,
		`baton_jobs_dead_total{queue="q",reason="crashed"}`:      0,
		`baton_jobs{queue="q",state="waiting"}`:                  0,
		`baton_jobs{queue="q",state="pending"}`:                  0,
		`baton_jobs{queue="q",state="scheduled"}`:                1,
		`baton_jobs{queue="q",state="dead"}`:                     5,

		// chains: none here, but each is reported from zero
		`baton_jobs{queue="q",state="blocked"}`:                       0,
		`baton_jobs_dead_total{queue="q",reason="dependency_failed"}`: 0,

		// Every run that ended, by its outcome: 101 done; 4 errors (the
		// flaky job's first run, retried, and 3 dead), a timeout, a rejection.
		`baton_job_duration_seconds_count{outcome="done",queue="q"}`:              101,
		`baton_job_duration_seconds_count{outcome="error",queue="q"}`:             4,
		`baton_job_duration_seconds_count{outcome="timeout",queue="q"}`:           1,
		`baton_job_duration_seconds_count{outcome="rejected",queue="q"}`:          1,
		`baton_job_duration_seconds_count{outcome="crashed",queue="q"}`:           0,
		`baton_slots_held{queue="q",role="run"}`:                                  1,
		`baton_slots_kept{queue="q"}`:                                             2,
		`baton_holder_overdue{queue="q",slot="` + fmt.Sprint(slot.Index()) + `"}`: 0,
	}
	for k, v := range want {
		got, ok := families[k]
		if !ok {
			t.Errorf("%s missing", k)
		} else if got != v {
			t.Errorf("%s = %v, want %v", k, got, v)
		}
	}
	if sum := families[`baton_job_duration_seconds_sum{outcome="done",queue="q"}`]; sum < 0.2 || sum > 30 {
		t.Errorf("duration sum %vs, want about 101 × 2ms", sum)
	}
	if sum := families[`baton_job_duration_seconds_sum{outcome="timeout",queue="q"}`]; sum < 0.05 || sum > 30 {
		t.Errorf("timeout duration sum %vs, want about its 50ms timeout", sum)
	}
	for _, o := range []string{"done", "error", "rejected"} {
		if le := families[`baton_job_duration_seconds_bucket{le="0.001",outcome="`+o+`",queue="q"}`]; le != 0 {
			t.Errorf("%v runs %s within 1ms; each slept 2ms", le, o)
		}
	}
	if n := families[`baton_job_duration_seconds_bucket{le="0.01",outcome="error",queue="q"}`]; n < 1 {
		t.Errorf("%v error runs within 10ms; each slept 2ms", n)
	}
	if age := families[`baton_holder_age_seconds{queue="q",slot="`+fmt.Sprint(slot.Index())+`"}`]; age < 59 || age > 120 {
		t.Errorf("holder age %v, want about 60s", age)
	}
}

// A Redis that does not answer: baton_up 0, the slot metrics still there.
func TestMetricsRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	srv.Stop()
	run, _ := lock.NewFileSet(t.TempDir(), "q", lock.RoleRun, 1)
	c := NewCollector(rdb, Queue{Name: "q", Run: run, Keep: 1})
	c.timeout = time.Second
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams := scrape(t, reg)
	if fams[`baton_up{queue="q"}`] != 0 || fams[`baton_slots_held{queue="q",role="run"}`] != 0 {
		t.Fatalf("%v", fams)
	}
}

// scrape gathers, writes the text exposition, parses it back and flattens
// it to "name{labels}" → value (histograms as _bucket, _sum, _count).
func scrape(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	parsed, err := parser.TextToMetricFamilies(&buf)
	if err != nil {
		t.Fatalf("parse exposition: %v\n%s", err, buf.String())
	}
	out := map[string]float64{}
	for name, mf := range parsed {
		for _, m := range mf.GetMetric() {
			labels := func(extra ...string) string {
				var ls []string
				for _, l := range m.GetLabel() {
					ls = append(ls, l.GetName()+`="`+l.GetValue()+`"`)
				}
				ls = append(ls, extra...)
				sort.Strings(ls)
				return "{" + strings.Join(ls, ",") + "}"
			}
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				out[name+"_count"+labels()] = float64(h.GetSampleCount())
				out[name+"_sum"+labels()] = h.GetSampleSum()
				for _, b := range h.GetBucket() {
					out[name+"_bucket"+labels(`le="`+fmt.Sprint(b.GetUpperBound())+`"`)] = float64(b.GetCumulativeCount())
				}
			case dto.MetricType_COUNTER:
				out[name+labels()] = m.GetCounter().GetValue()
			default:
				out[name+labels()] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// Known slot history: one holder of k=2 retires and a standby takes its
// slot 200ms later; the gap histogram counts one promotion gap of about
// 200ms and the time below k grows while one slot of two is held.
func TestMetricsCoverage(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	run, _ := lock.NewFileSet(t.TempDir(), "q", lock.RoleRun, 2)
	r := &history.Recorder{Client: rdb, Queue: "q", Keep: 2, Run: run, PID: 1, Host: "h"}
	if _, _, err := r.Took(ctx, 0, history.ByCandidate, nil, -1); err != nil {
		t.Fatal(err)
	}
	if err := r.Left(ctx, 0, history.WhyLifetime, 5); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if _, _, err := r.Took(ctx, 0, history.ByStandby, nil, -1); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(rdb, Queue{Name: "q", Run: run, Keep: 2}))
	fams := scrape(t, reg)
	if n := fams[`baton_slot_gap_seconds_count{by="standby",queue="q"}`]; n != 1 {
		t.Errorf("promotion gaps counted: %v, want 1", n)
	}
	if n := fams[`baton_slot_gap_seconds_count{by="candidate",queue="q"}`]; n != 0 {
		t.Errorf("candidate gaps counted: %v, want 0 (the first take has no gap)", n)
	}
	if s := fams[`baton_slot_gap_seconds_sum{by="standby",queue="q"}`]; s < 0.15 || s > 5 {
		t.Errorf("promotion gap sum %vs, want about 0.2s", s)
	}
	if le := fams[`baton_slot_gap_seconds_bucket{by="standby",le="0.1",queue="q"}`]; le != 0 {
		t.Errorf("%v gaps within 0.1s; the one gap was 200ms", le)
	}
	below := fams[`baton_below_k_seconds_total{queue="q"}`]
	if below < 0.15 || below > 5 {
		t.Fatalf("below k %vs, want about 0.2s (one holder of two, then none)", below)
	}
	time.Sleep(300 * time.Millisecond)
	if again := scrape(t, reg)[`baton_below_k_seconds_total{queue="q"}`]; again < below+0.25 {
		t.Errorf("below k %vs, then %vs 300ms later with one holder of two: not growing", below, again)
	}
}

// In fleet mode each held run lease reports its time left on Redis' clock:
// near lease_ttl while renewed.
func TestMetricsLeaseTimeLeft(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	run, err := lock.NewLeaseSet(rdb, "q", lock.RoleRun, 2, lock.LeaseOptions{Host: "h", TTL: 3 * time.Second, Renew: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.MarkFresh(context.Background(), rdb, "q"); err != nil { // a new server: no pause
		t.Fatal(err)
	}
	slot, ok, err := run.TryAcquire()
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	defer slot.Release()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(rdb, Queue{Name: "q", Run: run, Keep: 2}))
	fams := scrape(t, reg)
	key := fmt.Sprintf(`baton_lease_seconds_left{queue="q",slot="%d"}`, slot.Index())
	if left, ok := fams[key]; !ok || left <= 2 || left > 3 {
		t.Fatalf("%s = %v (present %v), want just under the 3s TTL", key, left, ok)
	}
	for k := range fams {
		if strings.HasPrefix(k, "baton_lease_seconds_left") && k != key {
			t.Errorf("%s: a free lease has no time left to report", k)
		}
	}
}
