package main

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

// TestClientsLocateKeyStreams: the Python and Node clients' job() say of
// jobs in their keys' streams (laid out by hand as docs/keys.md says)
// what baton job says: waiting (the jobs ahead of it, its key's counts)
// or running (its slot and deliveries), at its level; an index entry
// whose stream entry is gone (it outlived the job's settle) leads to where
// the job is now (done), or nowhere.
func TestClientsLocateKeyStreams(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	pythonClient(t)
	nodeClient(t)
	ctx := context.Background()
	rdb := r.client()
	k := work.KeysFor("default")
	id := func(i int) string { return fmt.Sprintf("1700000000000-%d", i) }
	put := func(p work.Priority, key string, i int) {
		s := k.KeyStream(p, key)
		if rdb.Exists(ctx, s).Val() == 0 {
			if err := rdb.XGroupCreateMkStream(ctx, s, work.Group, "0").Err(); err != nil {
				t.Fatal(err)
			}
		}
		values := []any{work.PayloadField, "x", "key", key}
		if p != work.PriorityNormal {
			values = append(values, "priority", p.String())
		}
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: s, ID: id(i), Values: append(values, "orig", id(i))}).Err(); err != nil {
			t.Fatal(err)
		}
		rdb.HSet(ctx, k.KeyJobs(), id(i), id(i)+"\n"+p.String()+"\n"+key)
		rdb.SAdd(ctx, k.KeyStreams(), s)
	}
	for i := 1; i <= 3; i++ {
		put(work.PriorityNormal, "tenant a", i)
	}
	put(work.PriorityHigh, "tenant a", 4)
	put(work.PriorityNormal, "tenant-b", 5)
	put(work.PriorityNormal, "tenant-b", 6)
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: work.Group, Consumer: "web1/run-2",
		Streams: []string{k.KeyStream(work.PriorityNormal, "tenant a"), ">"}, Count: 1}).Err(); err != nil {
		t.Fatal(err)
	}
	// 5 is done, 6 gone: their entries deleted, the index left behind.
	rdb.XDel(ctx, k.KeyStream(work.PriorityNormal, "tenant-b"), id(5), id(6))
	rdb.ZAdd(ctx, k.Done, redis.Z{Score: float64(time.Now().UnixMilli()), Member: id(5)})

	ids := []string{id(1), id(2), id(3), id(4), id(5), id(6)}
	want := r.batonJobs("default", ids)
	for i, w := range []string{"running web1/run-2 0 3", "waiting  0 3", "waiting  1 3", "waiting  0 2", "done  0 0", "unknown  0 0"} {
		if got := fmt.Sprintf("%v %v %v %v", want[i]["state"], str(want[i]["consumer"]), num(want[i]["ahead"]),
			num(want[i]["key_running"])+num(want[i]["key_waiting"])); got != w {
			t.Errorf("baton job %s: %v, want %s", ids[i], want[i], w)
		}
	}
	var ops []map[string]any
	for _, id := range ids {
		ops = append(ops, map[string]any{"op": "job", "id": id})
	}
	for _, p := range producers[1:] {
		for _, decode := range []bool{false, true} {
			if p == "node" && decode {
				continue
			}
			res := r.drive(p, "default", map[string]any{"decode": decode, "python_parser": decode}, ops...)
			for i := range ids {
				if !reflect.DeepEqual(res[i], want[i]) {
					t.Errorf("%s (decode %v): job(%s):\n%v\nbaton job says:\n%v", p, decode, ids[i], res[i], want[i])
				}
			}
		}
	}
}

func str(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

func num(v any) int {
	f, _ := v.(float64)
	return int(f)
}
