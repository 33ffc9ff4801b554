package periodic_test

import (
	"fmt"
	"time"

	"github.com/baton-run/baton/periodic"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// A holder starts the ticker with the queue's entries and stops it when it
// leaves; every holder of the queue does the same, and each tick is
// enqueued once.
func ExampleStart() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	entries := []periodic.Entry{{Name: "nightly", Schedule: "CRON_TZ=Europe/Berlin 30 2 * * *", Payload: []byte("report"), CatchUp: periodic.CatchUpAll}}
	if err := periodic.Check(entries); err != nil {
		fmt.Println(err)
		return
	}
	stop, err := periodic.Start(periodic.Config{Client: rdb, Queue: "reports", Entries: entries, Logger: zerolog.Nop()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	// work.Run drains the queue meanwhile; a handler reads the tick its
	// job was enqueued for in Job.Tick and the entry in Job.Periodic.
}

// The ticks of a schedule in its time zone, across the night Berlin's
// clocks go back: 02:30 happens twice, an hour apart, and fires twice.
func ExampleSchedule_Next() {
	s, err := periodic.ParseSchedule("CRON_TZ=Europe/Berlin 30 2 * * *")
	if err != nil {
		fmt.Println(err)
		return
	}
	t := time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC)
	for i := 0; i < 3; i++ {
		t = s.Next(t)
		fmt.Println(t.Format(time.RFC3339))
	}
	// Output:
	// 2026-10-25T02:30:00+02:00
	// 2026-10-25T02:30:00+01:00
	// 2026-10-26T02:30:00+01:00
}
