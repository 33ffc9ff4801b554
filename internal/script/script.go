// Package script runs baton's Lua scripts on Redis by EVALSHA only, loading
// a script again when Redis lost it (a restart, SCRIPT FLUSH): it never
// needs EVAL, so a Redis with EVAL renamed away works.
package script

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Run runs s with keys and args by EVALSHA, reloading it once on NOSCRIPT.
func Run(ctx context.Context, rdb redis.Scripter, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	cmd := s.EvalSha(ctx, rdb, keys, args...)
	if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		if lerr := s.Load(ctx, rdb).Err(); lerr != nil {
			return cmd
		}
		cmd = s.EvalSha(ctx, rdb, keys, args...)
	}
	return cmd
}
