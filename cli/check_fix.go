package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/baton-run/baton/standby"
)

// change is one key of a combined fix.
type change struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// combinedFix finds one set of changes after which no relation fails. Each
// relation's own fix is computed for the config as it is, and applying one
// can break another (a longer lifetime needs a longer standby_wait); this
// applies them in dependency order, raising values only, until none fails:
// lifetime and spawn first, then standby_wait, which depends on both.
// ok is false when no change with these keys helps (spawn above 64, one
// host that cannot be lost).
func combinedFix(q standby.Quantities) (changes []change, ok bool) {
	orig := q
	for range 8 {
		failed := map[string]bool{}
		for _, r := range standby.Check(q) {
			if r.Status == standby.Fail {
				failed[r.Name] = true
			}
		}
		if len(failed) == 0 {
			return diffQuantities(orig, q), true
		}
		if failed["cron-beats-lifetime"] {
			q.Lifetime = nextSecond(q.C + q.E())
		}
		if failed["replenishment"] || failed["host-loss"] {
			firings := q.FiringsPerLife()
			hosts := q.H()
			if failed["host-loss"] {
				hosts-- // what the hosts left after losing one must start
			}
			per := firings * max(q.Lines, 1) * hosts // candidates per lifetime for each unit of spawn
			if spawn := (q.Slots + per - 1) / max(per, 1); firings > 0 && spawn <= 64 {
				q.Spawn = spawn
			} else {
				m := max(q.M()/q.H()*hosts, 1)
				need := (q.Slots + m - 1) / m
				q.Lifetime = time.Duration(need)*q.C + q.E()
			}
		}
		if failed["host-cap"] {
			q.MaxPerHost = (q.Slots + q.H() - 2) / (q.H() - 1)
		}
		if failed["host-room"] {
			q.MaxPerHost = max(q.MaxPerHost, (q.RoomNeeded()+q.H()-1)/q.H())
		}
		if failed["standby-slots"] {
			q.StandbySlots = q.Slots
		}
		if failed["visibility-timeout"] {
			q.Visibility = nextSecond(q.JobTimeout + q.Grace)
		}
		// S ≥ 2·H covers S > H and S ≥ L_max too; leases add S > H + lease_ttl.
		if q.StandbyWait < 2*q.Deadline() {
			q.StandbyWait = (2*q.Deadline() + time.Second - 1).Truncate(time.Second)
		}
		if q.Fleet() && q.StandbyWait <= q.Deadline()+q.LeaseTTL {
			q.StandbyWait = nextSecond(q.Deadline() + q.LeaseTTL)
		}
	}
	return nil, false
}

func nextSecond(d time.Duration) time.Duration { return d.Truncate(time.Second) + time.Second }

// diffQuantities lists the config keys whose value differs from a to b.
func diffQuantities(a, b standby.Quantities) []change {
	var out []change
	d := func(key string, x, y time.Duration) {
		if x != y {
			out = append(out, change{key, standby.FormatDuration(y)})
		}
	}
	n := func(key string, x, y int) {
		if x != y {
			out = append(out, change{key, fmt.Sprint(y)})
		}
	}
	d("lifetime", a.Lifetime, b.Lifetime)
	n("spawn", a.Spawn, b.Spawn)
	n("standby_slots", a.StandbySlots, b.StandbySlots)
	n("max_per_host", a.MaxPerHost, b.MaxPerHost)
	d("standby_wait", a.StandbyWait, b.StandbyWait)
	d("visibility_timeout", a.Visibility, b.Visibility)
	return out
}

// fixText writes changes as config lines and as flags for a check to try.
func fixText(changes []change) (toml, flags string) {
	var t, f []string
	for _, c := range changes {
		v := c.Value
		if c.Key != "spawn" && c.Key != "standby_slots" && c.Key != "max_per_host" {
			v = fmt.Sprintf("%q", v)
		}
		t = append(t, c.Key+" = "+v)
		f = append(f, "--"+strings.ReplaceAll(c.Key, "_", "-")+" "+c.Value)
	}
	return strings.Join(t, ", "), strings.Join(f, " ")
}
