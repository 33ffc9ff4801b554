package web

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/baton-run/baton/work"
)

// chartMinutes is the span of the charts: the last hour, one bar a minute.
const chartMinutes = 60

// Chart geometry, in SVG user units (the CSS scales it to the page).
const (
	chartW, chartH = 600.0, 120.0
	barW           = chartW / chartMinutes
)

// charts are the queue's last hour, from the per-minute samples holders
// append (work.SampleStats) and the stats hash as it is now: throughput
// (jobs done and failed runs a minute) and latency (mean handler time a
// minute, from the duration histogram's sum).
type charts struct {
	Samples    int // samples in the hour; 0: no holder has run in it
	Throughput []bar
	Latency    []bar
	MaxRate    float64 // jobs a minute at the top of the throughput chart
	MaxLatency float64 // seconds at the top of the latency chart
	Done       int64   // in the hour
	Failed     int64   // failed runs in the hour: retried and dead-lettered
	Mean       string  // mean handler time of the hour's jobs done
	P95        string  // the histogram bucket holding the 95th percentile
	From, To   time.Time
}

// bar is one minute of a chart: the part from Y to the baseline is the
// main series (done, latency), from Y2 to Y the second (failed).
type bar struct {
	X, Y, H, Y2, H2 float64
	Title           string
}

// minute is what happened in one minute of the chart.
type minute struct {
	done, failed, sumUS float64
	dur                 []float64 // per bucket of work.DurationBuckets, and the rest
}

// failedRuns counts the failed runs in a stats hash: retried ones and the
// last ones of dead-lettered jobs.
func failedRuns(s map[string]int64) int64 {
	return s[work.StatRetried] + s[work.StatDead]
}

// buildCharts spreads the growth of the counters between consecutive
// samples over the minutes between them (a holder samples at the start of
// each minute; with none running the counters do not move), then draws.
func buildCharts(samples []work.Sample, stats map[string]int64, now time.Time) charts {
	end := now.Truncate(time.Minute).Add(time.Minute) // the end of the current minute
	start := end.Add(-chartMinutes * time.Minute)
	pts := append(samples[:len(samples):len(samples)], work.Sample{At: now, Stats: stats})
	var mins [chartMinutes]minute
	for i := range mins {
		mins[i].dur = make([]float64, len(work.DurationBuckets)+1)
	}
	c := charts{From: start, To: now}
	for i := 1; i < len(pts); i++ {
		a, b := pts[i-1], pts[i]
		if !b.At.After(a.At) || !b.At.After(start) {
			continue
		}
		if a.At.After(start) || a.At.Equal(start) {
			c.Samples++
		}
		// The minutes [a, b) cover; the counters' growth is spread evenly.
		first := int(math.Floor(a.At.Sub(start).Minutes()))
		last := int(math.Ceil(b.At.Sub(start).Minutes())) - 1
		n := float64(last - first + 1)
		delta := func(f string) float64 { return float64(max(0, b.Stats[f]-a.Stats[f])) / n }
		fail := float64(max(0, failedRuns(b.Stats)-failedRuns(a.Stats))) / n
		for m := max(first, 0); m <= min(last, chartMinutes-1); m++ {
			mins[m].done += delta(work.StatDone)
			mins[m].failed += fail
			mins[m].sumUS += delta(work.StatDurSumUS)
			for j := range mins[m].dur {
				mins[m].dur[j] += delta(work.StatDurPrefix + strconv.Itoa(j))
			}
		}
	}
	all := minute{dur: make([]float64, len(work.DurationBuckets)+1)}
	for _, m := range mins {
		c.MaxRate = max(c.MaxRate, m.done+m.failed)
		if m.done > 0 {
			c.MaxLatency = max(c.MaxLatency, m.sumUS/m.done/1e6)
		}
		all.done += m.done
		all.failed += m.failed
		all.sumUS += m.sumUS
		for j := range all.dur {
			all.dur[j] += m.dur[j]
		}
	}
	c.MaxRate = niceCeil(c.MaxRate)
	c.MaxLatency = niceCeil(c.MaxLatency)
	c.Done, c.Failed = int64(math.Round(all.done)), int64(math.Round(all.failed))
	if all.done > 0 {
		c.Mean = seconds(all.sumUS / all.done / 1e6)
		c.P95 = percentile(all.dur, all.done, 0.95)
	}
	for i, m := range mins {
		x := float64(i) * barW
		at := start.Add(time.Duration(i) * time.Minute).Local().Format("15:04")
		h := scale(m.done, c.MaxRate)
		h2 := scale(m.failed, c.MaxRate)
		c.Throughput = append(c.Throughput, bar{X: x, Y: chartH - h, H: h, Y2: chartH - h - h2, H2: h2,
			Title: fmt.Sprintf("%s: %.0f done, %.0f failed runs", at, m.done, m.failed)})
		lat, title := 0.0, at+": no jobs done"
		if m.done > 0 {
			lat = m.sumUS / m.done / 1e6
			title = fmt.Sprintf("%s: mean %s over %.0f jobs, p95 %s", at, seconds(lat), m.done, percentile(m.dur, m.done, 0.95))
		}
		h = scale(lat, c.MaxLatency)
		c.Latency = append(c.Latency, bar{X: x, Y: chartH - h, H: h, Title: title})
	}
	return c
}

// scale is v's bar height on a chart topped by top.
func scale(v, top float64) float64 {
	if top <= 0 || v <= 0 {
		return 0
	}
	return math.Max(1, v/top*chartH)
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 0
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// percentile names the histogram bucket that holds quantile q of n jobs:
// "≤ 50ms", or "> 5m0s" for the last.
func percentile(buckets []float64, n, q float64) string {
	cum := 0.0
	for i, c := range buckets {
		cum += c
		if cum >= q*n-1e-9 && i < len(work.DurationBuckets) {
			return "≤ " + seconds(work.DurationBuckets[i])
		}
	}
	return "> " + seconds(work.DurationBuckets[len(work.DurationBuckets)-1])
}

func seconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}
