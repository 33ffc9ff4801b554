package web

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/work"
)

// TestBuildCharts: the counters' growth between samples lands in the
// minutes between them and adds up to the hour's totals.
func TestBuildCharts(t *testing.T) {
	at := func(hm string) time.Time {
		tm, err := time.ParseInLocation("15:04:05", hm, time.Local)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	stats := func(done, retried, dead int64) map[string]int64 {
		return map[string]int64{work.StatDone: done, work.StatRetried: retried, work.StatDead: dead,
			work.StatDurPrefix + "4": done, work.StatDurSumUS: done * 80000} // every job 80ms: bucket (50ms, 100ms]
	}
	samples := []work.Sample{
		{At: at("11:01:00"), Stats: stats(0, 0, 0)}, // before the hour: only its growth after counts
		{At: at("12:00:00"), Stats: stats(0, 0, 0)},
		{At: at("12:10:00"), Stats: stats(100, 5, 0)},
		{At: at("12:30:00"), Stats: stats(160, 5, 2)},
	}
	c := buildCharts(samples, stats(190, 5, 2), at("12:30:30"))
	if c.Done != 190 || c.Failed != 7 || c.Samples != 3 || c.Mean != "80ms" || c.P95 != "≤ 100ms" || c.MaxRate != 50 {
		t.Errorf("hour: %d done, %d failed, %d samples, mean %s, p95 %s, top %v", c.Done, c.Failed, c.Samples, c.Mean, c.P95, c.MaxRate)
	}
	if len(c.Throughput) != chartMinutes || len(c.Latency) != chartMinutes {
		t.Fatalf("%d and %d bars", len(c.Throughput), len(c.Latency))
	}
	// The chart starts at 11:31: 12:00-12:09 is bars 29-38 (10 a minute),
	// 12:10-12:29 bars 39-58 (3 a minute), the current minute bar 59 (30).
	for i, want := range map[int]float64{28: 0, 29: 10, 38: 10, 39: 3, 58: 3, 59: 30} {
		h := c.Throughput[i].H
		if math.Abs(h-want/50*chartH) > 1e-9 && !(want > 0 && h == 1 && want/50*chartH < 1) {
			t.Errorf("bar %d: height %v, want %v", i, h, want/50*chartH)
		}
	}
	if !strings.HasPrefix(c.Throughput[29].Title, at("12:00:00").Format("15:04")+": 10 done, 0 failed runs") {
		t.Errorf("bar 29: %q", c.Throughput[29].Title)
	}
	if math.Abs(c.Latency[40].H-0.8*chartH) > 1e-6 || !strings.Contains(c.Latency[40].Title, "mean 80ms over 3 jobs, p95 ≤ 100ms") {
		t.Errorf("latency bar 40: %v %q (top %v)", c.Latency[40].H, c.Latency[40].Title, c.MaxLatency)
	}

	// A counter that went down (the stats hash deleted) counts as no growth.
	c = buildCharts([]work.Sample{{At: at("12:00:00"), Stats: stats(500, 0, 0)}}, stats(10, 0, 0), at("12:30:30"))
	if c.Done != 0 {
		t.Errorf("after a reset: %d done", c.Done)
	}
	// No samples: empty charts, said so.
	if c = buildCharts(nil, stats(10, 0, 0), at("12:30:30")); c.Samples != 0 || c.Done != 0 || c.Mean != "" {
		t.Errorf("no samples: %+v", c)
	}
}

func TestPreview(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                     "plain",
		"two\nlines\ttab":           `two\nlines\ttab`,
		"\x1b[2Jclear":              `\x1b[2Jclear`,
		"rtl\u202eevil":             `rtl\u202eevil`,
		"\xff\x00bin":               `\xff\x00bin`,
		strings.Repeat("é", 100):    strings.Repeat("é", 60) + "…",
		strings.Repeat("x", 121):    strings.Repeat("x", 120) + "…",
		"<script>alert(1)</script>": "<script>alert(1)</script>", // html/template escapes it
	} {
		if got := preview([]byte(in), previewBytes); got != want {
			t.Errorf("preview(%q) = %q, want %q", in, got, want)
		}
	}
}
