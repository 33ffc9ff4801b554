package web

import (
	"context"

	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

// openBatchesShown bounds the open batches the dashboard shows.
const openBatchesShown = 20

// batchRow is an open batch (not complete) with its progress: the share of
// its members settled, in percent.
type batchRow struct {
	*work.BatchInfo
	Percent int
}

// openBatches reads queue q's batches not yet complete, oldest first (a
// failure reads as none: the rest of the page still shows).
func openBatches(ctx context.Context, rdb redis.Cmdable, q string) []batchRow {
	bs, err := work.ListBatches(ctx, rdb, q)
	if err != nil {
		return nil
	}
	var rows []batchRow
	for _, b := range bs {
		if b.Complete || len(rows) == openBatchesShown {
			continue
		}
		pct := 0
		if b.Total > 0 {
			pct = int((b.Done + b.Dead) * 100 / b.Total)
		}
		rows = append(rows, batchRow{BatchInfo: b, Percent: pct})
	}
	return rows
}
