package holder

import (
	"time"

	"github.com/baton-run/baton/metrics"
)

// writeMetrics rewrites metrics_file every 5s while the holder runs, in a
// goroutine the returned func stops (and waits for). A failure is logged
// once, at warn; the holder carries on.
func (h *Holder) writeMetrics() (stop func()) {
	path := h.cfg.MetricsFile
	c := h.metricsCollector()
	if c == nil {
		return func() {}
	}
	done, quit := make(chan struct{}), make(chan struct{})
	t := h.clk.NewTicker(5 * time.Second)
	go func() {
		defer close(done)
		defer t.Stop()
		failing := false
		for {
			err := metrics.WriteFile(path, c)
			if err != nil && !failing {
				h.log.Warn().Err(err).Str("metrics_file", path).Msg("cannot write the metrics file; retrying every 5s")
			}
			failing = err != nil
			select {
			case <-quit:
				return
			case <-t.C():
			}
		}
	}()
	return func() { close(quit); <-done }
}

// metricsCollector is the queue's collector for metrics_file, built once
// from the holder's slot sets, or nil when there is no file to write.
func (h *Holder) metricsCollector() *metrics.Collector {
	if h.collector != nil || h.cfg.MetricsFile == "" || h.rdb == nil || h.o.Run == nil {
		return h.collector
	}
	q := metrics.Queue{Name: h.cfg.Queue, Run: h.o.Run, Keep: h.cfg.MinSlots}
	if h.o.Standby != nil {
		q.Standby = h.o.Standby
	}
	h.collector = metrics.NewCollector(h.rdb, q)
	return h.collector
}

// writeMetricsOnce rewrites metrics_file once, as a holder leaves.
func (h *Holder) writeMetricsOnce() {
	if c := h.metricsCollector(); c != nil {
		if err := metrics.WriteFile(h.cfg.MetricsFile, c); err != nil {
			h.log.Warn().Err(err).Str("metrics_file", h.cfg.MetricsFile).Msg("cannot write the metrics file")
		}
	}
}
