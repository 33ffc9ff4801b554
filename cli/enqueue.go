package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

const enqueueUsage = `Usage: baton enqueue [flags] [PAYLOAD...]

Add one job per PAYLOAD argument or, with none, one job per line of standard
input (the newline is not part of the payload; empty lines are skipped).
Jobs are sent pipelined; each job's id is printed on its own line. A payload
over max_payload bytes is refused (exit 2); the jobs before it are added.

{{flags}}
Example:
  baton enqueue --queue thumbs /srv/img/1.jpg /srv/img/2.jpg
  find /srv/img -name '*.jpg' | baton enqueue --queue thumbs --quiet
`

// enqueueChunk is how many XADDs go in one pipeline round trip.
const enqueueChunk = 1000

func runEnqueue(ctx context.Context, e *env, args []string) error {
	fs := flagSet("enqueue")
	cf := config.Bind(fs, config.Connection, "max_payload")
	quiet := fs.BoolP("quiet", "q", false, "do not print job ids")
	if err := parse(e, fs, enqueueUsage, args); err != nil {
		return err
	}
	cfg, rdb, err := loadAndConnect(ctx, e, cf, 2)
	if err != nil {
		return err
	}
	defer rdb.Close()
	q := &enqueuer{rdb: rdb, stream: work.KeysFor(cfg.Queue).Stream, out: bufio.NewWriter(e.Stdout), quiet: *quiet, max: cfg.MaxPayload}
	defer q.out.Flush()
	if fs.NArg() > 0 {
		for _, p := range fs.Args() {
			if err := q.add(ctx, []byte(p)); err != nil {
				return err
			}
		}
		return q.flush(ctx)
	}
	in := bufio.NewReaderSize(e.Stdin, 64<<10)
	for {
		line, rerr := in.ReadBytes('\n')
		line = bytes.TrimSuffix(line, []byte("\n"))
		if len(line) > 0 {
			if err := q.add(ctx, line); err != nil {
				return err
			}
		}
		if errors.Is(rerr, io.EOF) {
			return q.flush(ctx)
		}
		if rerr != nil {
			_ = q.flush(ctx)
			return fmt.Errorf("read stdin: %w", rerr)
		}
	}
}

// enqueuer batches XADDs into pipelines.
type enqueuer struct {
	rdb    *redis.Client
	stream string
	out    *bufio.Writer
	quiet  bool
	max    int // max_payload
	batch  [][]byte
	added  int
	line   int // payloads seen, for errors
}

func (q *enqueuer) add(ctx context.Context, payload []byte) error {
	q.line++
	if len(payload) > q.max {
		ferr := q.flush(ctx)
		return errors.Join(usagef("raise max_payload, or pass a reference (a path, a URL) instead of the data",
			"enqueue: payload %d is %d bytes, over max_payload (%d); %d jobs added before it", q.line, len(payload), q.max, q.added), ferr)
	}
	q.batch = append(q.batch, payload)
	if len(q.batch) >= enqueueChunk {
		return q.flush(ctx)
	}
	return nil
}

func (q *enqueuer) flush(ctx context.Context) error {
	if len(q.batch) == 0 {
		return nil
	}
	cmds, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, b := range q.batch {
			p.XAdd(ctx, &redis.XAddArgs{Stream: q.stream, Values: []any{work.PayloadField, b}})
		}
		return nil
	})
	for _, c := range cmds {
		if c.Err() != nil {
			break
		}
		q.added++
		if !q.quiet {
			fmt.Fprintln(q.out, c.(*redis.StringCmd).Val())
		}
	}
	q.batch = q.batch[:0]
	if err != nil {
		return fmt.Errorf("enqueue: %d jobs added before: %w", q.added, err)
	}
	return nil
}
