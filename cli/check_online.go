package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/standby"
	"github.com/baton-run/baton/work"
)

// minRedis is the oldest Redis baton runs on: XAUTOCLAIM came in 6.2.
var minRedis = [2]int{6, 2}

// checkOnline asks Redis whether it is reachable, recent enough, and has the
// queue's consumer group. It reads only.
func checkOnline(ctx context.Context, cfg *config.Config) []standby.Relation {
	url := cfg.RedisName()
	reach := standby.Relation{Name: "redis-reachable", Formula: "PING", Values: url, Margin: "-",
		Why: "holders and standbys connect to it"}
	rdb, err := connect(ctx, cfg, 1)
	if err != nil {
		reach.Status, reach.Why = standby.Fail, err.Error()
		reach.Fix = "start Redis, or set redis_url (or BATON_REDIS_URL) to where it runs"
		var he *hintError
		if errors.As(err, &he) {
			reach.Fix = he.hint
		}
		return []standby.Relation{reach}
	}
	defer rdb.Close()

	ver := standby.Relation{Name: "redis-version", Formula: fmt.Sprintf("version ≥ %d.%d", minRedis[0], minRedis[1]), Margin: "-",
		Why: "baton claims abandoned jobs with XAUTOCLAIM (Redis 6.2)"}
	info, err := rdb.Info(ctx, "server").Result()
	v := infoField(info, "redis_version")
	switch {
	case err != nil:
		ver.Status, ver.Values, ver.Why = standby.Fail, "unknown", "INFO server: "+err.Error()
		ver.Fix = "allow the INFO command for this user"
	case !atLeast(v, minRedis):
		ver.Status, ver.Values = standby.Fail, v
		ver.Fix = fmt.Sprintf("upgrade Redis to %d.%d or later", minRedis[0], minRedis[1])
	default:
		ver.Values = v
	}

	k := work.KeysFor(cfg.Queue)
	group := standby.Relation{Name: "redis-group", Formula: "group " + work.Group + " on " + k.Stream, Margin: "-",
		Why: "holders read the stream through this consumer group"}
	groups, err := rdb.XInfoGroups(ctx, k.Stream).Result()
	found := false
	for _, g := range groups {
		found = found || g.Name == work.Group
	}
	switch {
	case found:
		group.Values = "present"
	case err != nil && !strings.Contains(err.Error(), "no such key"):
		group.Status, group.Values, group.Why = standby.Fail, "unknown", "XINFO GROUPS: "+err.Error()
		group.Fix = "allow XINFO for this user"
	default:
		group.Status, group.Values = standby.Warn, "missing"
		group.Why = "no holder or enqueue has run yet; the first one creates the stream and the group"
		group.Fix = "none needed, or run 'baton enqueue' once to create it"
	}
	return []standby.Relation{reach, ver, group}
}

// infoField reads one "key:value" line of an INFO reply.
func infoField(info, key string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+":"); ok {
			return v
		}
	}
	return ""
}

// atLeast reports whether a dotted version is at least min (major, minor).
func atLeast(v string, min [2]int) bool {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	maj, err1 := strconv.Atoi(parts[0])
	mnr, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return maj > min[0] || maj == min[0] && mnr >= min[1]
}
