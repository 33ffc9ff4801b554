package work

import (
	"context"
	_ "embed"
	"strconv"

	"github.com/redis/go-redis/v9"
)

//go:embed keylua/enqueue.lua
var keyEnqueueLua string

// keyEnqueueScript adds jobs that have a key and no delay to their keys'
// streams: each job's id is reserved from the normal stream's id space (an
// entry added and deleted in the same script, as for a delayed job), its
// fields and orig (its id) are added to its key's stream of its level under
// that same id (a stream made now gets the group, and joins the set of key
// streams), the index names the entry, and the key joins the level's ring
// unless it is in it. A unique key is checked and taken as by
// enqueueScript.
//
// KEYS[1] stream, KEYS[2] key jobs index, KEYS[3..] unique keys (one per
// job that has one, in job order); ARGV[1] the key names' prefix
// (Keys.keyBase), ARGV[2] a MessagePack array of, per job: its level
// ("high", "normal", "low"), its key, "" or "u" (a unique key) or "t" (one
// with a TTL, which comes next, in ms), then its record: a MessagePack
// array of its field/value strings whose length counts the "orig" pair the
// script appends. Returns one id per job (the queued job's id for a
// duplicate), then the number of each duplicate (1 for the call's first):
// the reply of enqueueScript, so collect reads both. The Python and Node
// clients run the same file (their lua/key_enqueue.lua,
// TestClientScriptsAreWorkLua) and pack the same ARGV: a change here is a
// change there.
var keyEnqueueScript = redis.NewScript(keyEnqueueLua)

// keyCall gathers the jobs of one keyEnqueueScript call.
type keyCall struct {
	jobs   []int
	unique []string
	args   []byte
	nargs  int
}

func (c *keyCall) add(i int, payload []byte, o *jobOptions, k Keys) {
	if c.args == nil {
		c.args = append(make([]byte, 0, 4<<10), 0xdd, 0, 0, 0, 0)
	}
	str := func(s string) {
		c.args = appendPackedString(c.args, s)
		c.nargs++
	}
	str(o.priority.String())
	str(o.key)
	switch {
	case o.unique == "":
		str("")
	case o.uniqueFor > 0:
		str("t")
		str(strconv.FormatInt(o.uniqueFor.Milliseconds(), 10))
	default:
		str("u")
	}
	if o.unique != "" {
		c.unique = append(c.unique, k.Unique(o.unique))
	}
	rec := appendFields(appendArrayHeader(nil, o.fields()+2), payload, o)
	c.args = appendPackedString(c.args, rec)
	c.nargs++
	c.jobs = append(c.jobs, i)
}

// send queues the call on p, and its plan.
func (c *keyCall) send(ctx context.Context, p redis.Pipeliner, k Keys, plan *[]carried) {
	if len(c.jobs) == 0 {
		return
	}
	n := c.nargs
	c.args[1], c.args[2], c.args[3], c.args[4] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	keys := append([]string{k.Stream, k.KeyJobs()}, c.unique...)
	// EVAL, not EVALSHA: a Redis that lost the script runs it all the same,
	// and enqueue's NOSCRIPT retry (which reloads enqueueScript) is not needed.
	keyEnqueueScript.Eval(ctx, p, keys, k.keyBase(), c.args)
	*plan = append(*plan, carried{batch: c.jobs})
	*c = keyCall{}
}
