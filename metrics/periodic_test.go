package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/periodic"
	"github.com/prometheus/client_golang/prometheus"
)

// A periodic entry's last tick and its ticks by outcome, from the records
// the claim script keeps.
func TestMetricsPeriodic(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	es := []periodic.Entry{{Name: "beat", Schedule: "@every 1s"}}
	if err := periodic.Check(es); err != nil {
		t.Fatal(err)
	}
	c, err := periodic.NewClaimer(rdb, "q", "h", es, nil)
	if err != nil {
		t.Fatal(err)
	}
	enqueued := 0
	for end := time.Now().Add(10 * time.Second); enqueued < 2 && time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		outs, err := c.Round(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range outs {
			if o.Kind == periodic.Enqueued {
				enqueued++
			}
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(rdb, Queue{Name: "q"}))
	fams := scrape(t, reg)
	if n := fams[`baton_periodic_ticks_total{entry="beat",outcome="enqueued",queue="q"}`]; n != float64(enqueued) || enqueued < 2 {
		t.Errorf("enqueued ticks %v, want %d", n, enqueued)
	}
	if _, ok := fams[`baton_periodic_ticks_total{entry="beat",outcome="skipped",queue="q"}`]; !ok {
		t.Errorf("no skipped series: %v", fams)
	}
	last := fams[`baton_periodic_last_tick_timestamp_seconds{entry="beat",queue="q"}`]
	if d := time.Since(time.UnixMilli(int64(last * 1000))); d < 0 || d > 5*time.Second || last != float64(int64(last)) {
		t.Errorf("last tick %v: want a whole second within 5s of now", last)
	}
}
