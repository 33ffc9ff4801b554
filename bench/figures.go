package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// figure is one measured quantity: one value per run.
type figure struct {
	Name   string    `json:"name"`
	Unit   string    `json:"unit"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Runs   []float64 `json:"runs"`
}

func (f *figure) add(v float64) {
	f.Runs = append(f.Runs, v)
	s := slices.Clone(f.Runs)
	slices.Sort(s)
	f.Min, f.Max = s[0], s[len(s)-1]
	if n := len(s); n%2 == 1 {
		f.Median = s[n/2]
	} else {
		f.Median = (s[n/2-1] + s[n/2]) / 2
	}
}

// target is one goal of issue 5 (or 14: enqueue; 12: workers), judged on medians.
type target struct {
	Goal  string  `json:"goal"`
	Value float64 `json:"value"` // the median, or the ratio of medians
	Limit float64 `json:"limit"`
	Met   bool    `json:"met"`
	Known bool    `json:"known"` // false when a figure it needs was not measured
}

// results holds every figure by name; order is the table's order.
type results struct {
	order []string
	figs  map[string]*figure
}

// figureOrder is the table's order: the order of issue 5.
var figureOrder = []string{
	"noop_c1", "noop_c10", "asynq_c1", "asynq_c10", "raw_batch_c1",
	"xadd_batch", "enqueue_plain", "asynq_enqueue_plain", "enqueue_unique", "asynq_enqueue_unique",
	"enqueue_in", "asynq_enqueue_in", "enqueue_priority", "asynq_enqueue_priority", "delayed_late_p50_ms", "delayed_late_p99_ms", "rate_200_per_s", "rate_200_worst_1s",
	"exec_c1", "exec_c2", "fork_c1", "fork_c2",
	"pickup_p50_ms", "pickup_p99_ms", "promotion_p50_ms", "promotion_p99_ms",
	"recovery_ms", "loser_wall_ms", "loser_rss_kb", "holder_rss_kb",
	"py_persistent_c1", "py_persistent_cmds_per_job", "rq_simple_c1", "rq_simple_cmds_per_job",
	"celery_prefork_c1", "celery_prefork_cmds_per_job", "node_persistent_c1", "node_persistent_cmds_per_job",
	"bullmq_c1", "bullmq_cmds_per_job", "go_1ms_c1", "persistent_1ms_c1", "protocol_p50_us", "protocol_p99_us",
	"client_go_batch", "client_py_batch", "client_node_batch", "rq_enqueue_many", "bullmq_add_bulk",
	"client_go_batch_high", "client_py_batch_high", "client_node_batch_high",
	"fleet_handover_p50_ms", "fleet_handover_p99_ms", "fleet_loser_p50_ms", "fleet_loser_p99_ms",
	"periodic_late_p50_ms", "periodic_late_p99_ms", "periodic_cmds_0", "periodic_cmds_100", "periodic_added_cmds", "periodic_claims_100", "periodic_cpu_0", "periodic_cpu_100",
	"periodic_noop_0", "periodic_noop_100", "periodic_noop_ratio", "cron_silence_s",
	"keys_fair_b_done_ms", "keys_fair_a_drain_ms", "keys_cap_most_running", "keys_cap_rate",
	"keys_noop_1000_keys_c10", "keys_noop_no_keys_c10", "keys_noop_ratio",
}

func newResults() *results {
	return &results{order: slices.Clone(figureOrder), figs: map[string]*figure{}}
}

func (r *results) add(name, unit string, v float64) {
	f, ok := r.figs[name]
	if !ok {
		f = &figure{Name: name, Unit: unit}
		r.figs[name] = f
		if !slices.Contains(r.order, name) {
			r.order = append(r.order, name)
		}
	}
	f.add(v)
}

func (r *results) median(name string) (float64, bool) {
	f, ok := r.figs[name]
	if !ok {
		return 0, false
	}
	return f.Median, true
}

// targets judges the goals of issue 5 on the medians measured.
func (r *results) targets() []target {
	var out []target
	ratio := func(goal, a, b string, limit float64) {
		va, oka := r.median(a)
		vb, okb := r.median(b)
		t := target{Goal: goal, Limit: limit, Known: oka && okb && vb > 0}
		if t.Known {
			t.Value = va / vb
			t.Met = t.Value >= limit
		}
		out = append(out, t)
	}
	below := func(goal, a string, limit float64) {
		v, ok := r.median(a)
		out = append(out, target{Goal: goal, Value: v, Limit: limit, Known: ok, Met: ok && v < limit})
	}
	above := func(goal, a string, limit float64) {
		v, ok := r.median(a)
		out = append(out, target{Goal: goal, Value: v, Limit: limit, Known: ok, Met: ok && v >= limit})
	}
	within := func(goal, a string, lo, hi float64) {
		v, ok := r.median(a)
		out = append(out, target{Goal: goal, Value: v, Limit: hi, Known: ok, Met: ok && v >= lo && v <= hi})
	}
	ratio("noop_c10 >= 10 x asynq_c10", "noop_c10", "asynq_c10", 10)
	ratio("noop_c1 >= 0.7 x raw_batch_c1", "noop_c1", "raw_batch_c1", 0.7)
	ratio("exec_c1 >= 0.8 x fork_c1", "exec_c1", "fork_c1", 0.8)
	below("pickup_p99_ms < 5", "pickup_p99_ms", 5)
	below("promotion_p99_ms < 50", "promotion_p99_ms", 50)
	below("recovery_ms < 1000", "recovery_ms", 1000)
	below("loser_wall_ms < 20", "loser_wall_ms", 20)
	if _, ok := r.median("fleet_handover_p99_ms"); ok { // the fleet group runs with -only alone
		below("fleet_handover_p99_ms <= 50", "fleet_handover_p99_ms", 50.001)
		below("fleet_loser_p99_ms <= 50", "fleet_loser_p99_ms", 50.001)
	}
	if _, ok := r.median("pause_last_start_p99_ms"); ok { // the control group runs with -only alone
		below("pause_last_start_p99_ms <= 1000", "pause_last_start_p99_ms", 1000.001)
		below("cancel_exec_gone_p99_ms <= 1000", "cancel_exec_gone_p99_ms", 1000.001)
		below("cancel_exec_fleet_gone_p99_ms <= 1000", "cancel_exec_fleet_gone_p99_ms", 1000.001)
		below("cancel_persistent_gone_p99_ms <= shutdown_grace (1000) + 1000", "cancel_persistent_gone_p99_ms", 2000.001)
		below("wait_after_ack_p99_ms <= 5", "wait_after_ack_p99_ms", 5.001)
	}
	if _, ok := r.median("periodic_late_p99_ms"); ok { // the periodic group runs with -only alone
		below("periodic_late_p99_ms <= 1000", "periodic_late_p99_ms", 1000.001)
		below("periodic_late_p50_ms <= 100", "periodic_late_p50_ms", 100.001)
		below("periodic_claims_100 <= 1 per s (100 entries)", "periodic_claims_100", 1.001)
		within("periodic_noop_ratio (100 entries over none) within 1 ± 5%", "periodic_noop_ratio", 0.95, 1.05)
		below("cron_silence_s <= 2C + 5 s = 9 (C = 2 s)", "cron_silence_s", 9.001)
	}
	if _, ok := r.median("keys_fair_b_done_ms"); ok { // the keys group runs with -only alone
		below("keys_fair_b_done_ms < 2000", "keys_fair_b_done_ms", 2000)
		within("keys_cap_most_running = 3", "keys_cap_most_running", 3, 3)
		above("keys_cap_rate >= 0.8 x 3 / 20 ms = 120", "keys_cap_rate", 120)
		above("keys_noop_ratio (1,000 keys over none) >= 0.7", "keys_noop_ratio", 0.7)
	}
	below("loser_rss_kb < 18432", "loser_rss_kb", 18*1024) // 15 MB until the OTLP exporters: docs/tracing.md
	below("holder_rss_kb < 30720", "holder_rss_kb", 30*1024)
	ratio("enqueue_plain >= 0.9 x xadd_batch", "enqueue_plain", "xadd_batch", 0.9)
	ratio("enqueue_unique >= 5 x asynq_enqueue_unique", "enqueue_unique", "asynq_enqueue_unique", 5)
	ratio("enqueue_in >= 5 x asynq_enqueue_in", "enqueue_in", "asynq_enqueue_in", 5)
	ratio("enqueue_priority >= 5 x asynq_enqueue_priority", "enqueue_priority", "asynq_enqueue_priority", 5)
	below("delayed_late_p99_ms < 550 (poll_interval + 50ms)", "delayed_late_p99_ms", 550)
	within("rate_200_per_s within 200 ± 5%", "rate_200_per_s", 190, 210)
	below("rate_200_worst_1s <= 210", "rate_200_worst_1s", 210.5)
	ratio("py_persistent_c1 >= 20 x rq_simple_c1", "py_persistent_c1", "rq_simple_c1", 20)
	ratio("py_persistent_c1 >= 10 x celery_prefork_c1", "py_persistent_c1", "celery_prefork_c1", 10)
	ratio("persistent_1ms_c1 >= 0.8 x go_1ms_c1", "persistent_1ms_c1", "go_1ms_c1", 0.8)
	ratio("client_py_batch >= 0.5 x client_go_batch", "client_py_batch", "client_go_batch", 0.5)
	ratio("client_node_batch >= 0.5 x client_go_batch", "client_node_batch", "client_go_batch", 0.5)
	ratio("client_py_batch > rq_enqueue_many", "client_py_batch", "rq_enqueue_many", 1)
	ratio("client_node_batch > bullmq_add_bulk", "client_node_batch", "bullmq_add_bulk", 1)
	ratio("batch_100k_c10 >= 0.8 x nobatch_100k_c10", "batch_100k_c10", "nobatch_100k_c10", 0.8)
	below("batch_callback_p99_ms <= 50", "batch_callback_p99_ms", 50.001)
	below("batch_wait_p99_ms <= 10", "batch_wait_p99_ms", 10.001)
	return out
}

// writeTable prints the figures and the targets as Markdown tables.
func (r *results) writeTable(w io.Writer) {
	fmt.Fprintln(w, "| figure | median | min | max | n | unit |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | --- |")
	for _, name := range r.order {
		f, ok := r.figs[name]
		if !ok {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %d | %s |\n", f.Name, num(f.Median), num(f.Min), num(f.Max), len(f.Runs), f.Unit)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | measured | met |")
	fmt.Fprintln(w, "| --- | ---: | --- |")
	for _, t := range r.targets() {
		switch {
		case !t.Known:
			fmt.Fprintf(w, "| %s | not measured | - |\n", t.Goal)
		case t.Met:
			fmt.Fprintf(w, "| %s | %s | yes |\n", t.Goal, num(t.Value))
		default:
			fmt.Fprintf(w, "| %s | %s | **no** |\n", t.Goal, num(t.Value))
		}
	}
}

// report is the -json output: one object.
type report struct {
	Machine machine   `json:"machine"`
	Config  runConfig `json:"config"`
	Figures []*figure `json:"figures"`
	Targets []target  `json:"targets"`
}

func (r *results) writeJSON(w io.Writer, m machine, c runConfig) error {
	rep := report{Machine: m, Config: c, Targets: r.targets()}
	for _, name := range r.order {
		if f, ok := r.figs[name]; ok {
			rep.Figures = append(rep.Figures, f)
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// num prints a value with about three significant digits, no exponent.
func num(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 100:
		return addCommas(fmt.Sprintf("%.0f", v))
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func addCommas(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
