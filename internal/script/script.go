// Package script runs baton's Lua scripts on Redis by EVALSHA only, loading
// a script again when Redis lost it (a restart, SCRIPT FLUSH): it never
// needs EVAL, so a Redis with EVAL renamed away works.
package script

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// plain maps the hash of each AllowOOM script to the same script without
// its flags line, for a Redis that knows no script flags.
var plain sync.Map // string → *redis.Script

// AllowOOM is src marked with the script flag allow-oom (Redis ≥ 7.0): Redis
// runs its writes at maxmemory too, where a script without flags has its
// first write refused. Only for scripts whose writes replace what exists or
// stay within a small bound (a lease's fields, one per slot). On a Redis
// older than 7.0, which cannot parse the flags line, Run runs src itself,
// refused at maxmemory as before.
func AllowOOM(src string) *redis.Script {
	s := redis.NewScript("#!lua flags=allow-oom\n" + src)
	plain.Store(s.Hash(), redis.NewScript(src))
	return s
}

// Run runs s with keys and args by EVALSHA, reloading it once on NOSCRIPT.
func Run(ctx context.Context, rdb redis.Scripter, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	cmd := s.EvalSha(ctx, rdb, keys, args...)
	if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		if lerr := s.Load(ctx, rdb).Err(); lerr != nil {
			if p, ok := plain.Load(s.Hash()); ok && strings.Contains(lerr.Error(), "compiling") {
				return Run(ctx, rdb, p.(*redis.Script), keys, args...) // no script flags before Redis 7.0
			}
			return cmd
		}
		cmd = s.EvalSha(ctx, rdb, keys, args...)
	}
	return cmd
}
