package work

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/baton-run/baton/internal/script"
	"github.com/redis/go-redis/v9"
)

// Errors of Prepare.
var (
	// ErrNoScripting means Redis refuses the Lua scripts baton settles jobs
	// with (EVALSHA or SCRIPT renamed away, or scripting disabled). Without
	// them no job could ever be acknowledged, so a holder must not start.
	ErrNoScripting = errors.New("redis does not run Lua scripts (EVALSHA and SCRIPT LOAD): baton needs them to settle jobs atomically")
	// ErrOOM means Redis is at maxmemory and refuses writes that need memory.
	ErrOOM = errors.New("redis is out of memory (maxmemory reached)")
)

// OOMHint says what to do about ErrOOM.
const OOMHint = "give Redis headroom (raise maxmemory or free memory) and keep maxmemory-policy noeviction, so jobs are refused rather than evicted"

// scripts are every script a holder runs; Prepare loads them all.
var scripts = []*redis.Script{takeScript, ackScript, retryScript, dueScript, deadScript, requeueScript, backScript, enqueueScript, rateScript, recordFieldScript, heartbeatScript, probeScript}

// probeScript proves that EVALSHA runs.
var probeScript = redis.NewScript(`return 1`)

// Prepare makes a queue ready for a holder, as one check at start: it loads
// baton's scripts into Redis (ErrNoScripting when Redis refuses them) and
// creates the stream and its consumer group only when missing, so a holder
// still starts on a Redis at maxmemory, where acknowledging jobs frees
// memory. The group starts at id 0 so jobs enqueued before any holder ran
// are delivered too.
func Prepare(ctx context.Context, rdb redis.Cmdable, k Keys) error {
	if err := loadScripts(ctx, rdb); err != nil {
		return err
	}
	if err := probeScript.EvalSha(ctx, rdb, nil).Err(); err != nil {
		return scriptingErr("EVALSHA", err)
	}
	return ensureGroup(ctx, rdb, k.Stream)
}

// scriptingErr tells a Redis that refuses scripts from one that failed.
func scriptingErr(cmd string, err error) error {
	var rerr redis.Error
	if errors.As(err, &rerr) && (strings.Contains(err.Error(), "unknown command") || strings.HasPrefix(err.Error(), "NOPERM")) {
		return fmt.Errorf("%w (%s: %v)", ErrNoScripting, cmd, err)
	}
	return err
}

// ensureGroup creates the stream and group when missing. XINFO GROUPS reads
// only, so it works under OOM; XGROUP CREATE … MKSTREAM does not.
func ensureGroup(ctx context.Context, rdb redis.Cmdable, stream string) error {
	groups, err := rdb.XInfoGroups(ctx, stream).Result()
	if err == nil {
		for _, g := range groups {
			if g.Name == Group {
				return nil
			}
		}
	} else if !strings.HasPrefix(err.Error(), "ERR no such key") {
		return err
	}
	err = rdb.XGroupCreateMkStream(ctx, stream, Group, "0").Err()
	switch {
	case err == nil || strings.HasPrefix(err.Error(), "BUSYGROUP"):
		return nil
	case IsOOM(err):
		return fmt.Errorf("create consumer group: %w: %v", ErrOOM, err)
	}
	return fmt.Errorf("create consumer group: %w", err)
}

// EnsureGroup creates the stream and its group when missing.
//
// Deprecated: use Prepare, which also checks that Redis runs baton's scripts.
func EnsureGroup(ctx context.Context, rdb redis.Cmdable, k Keys) error {
	return ensureGroup(ctx, rdb, k.Stream)
}

// IsOOM reports whether err is Redis refusing a write at maxmemory.
func IsOOM(err error) bool {
	return err != nil && (errors.Is(err, ErrOOM) || strings.HasPrefix(err.Error(), "OOM "))
}

// runScript runs s by EVALSHA only, reloading it on NOSCRIPT (script.Run).
var runScript = script.Run

// permanent reports whether a Redis error will repeat however often the same
// call is retried: a key of the wrong type, OOM, a script error, a refused
// command. Connection errors, timeouts and a Redis that is loading or busy
// are transient.
func permanent(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false // network: transient
	}
	msg := err.Error()
	for _, p := range []string{"LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN", "READONLY", "CLUSTERDOWN", "MOVED", "ASK"} {
		if strings.HasPrefix(msg, p) {
			return false
		}
	}
	return true
}

// loadScripts loads the scripts Redis does not have yet: one SCRIPT EXISTS
// for all of them, then a SCRIPT LOAD each for the missing (only on a fresh
// or flushed Redis). A promoted standby prepares again as it starts work,
// and a dozen SCRIPT LOAD round trips there were a part of the hand-over's
// gap.
func loadScripts(ctx context.Context, rdb redis.Cmdable) error {
	hashes := make([]string, len(scripts))
	for i, s := range scripts {
		hashes[i] = s.Hash()
	}
	// Refused (an ACL without SCRIPT EXISTS): load them all, as before.
	have, _ := rdb.ScriptExists(ctx, hashes...).Result()
	for i, s := range scripts {
		if i < len(have) && have[i] {
			continue
		}
		if err := s.Load(ctx, rdb).Err(); err != nil {
			return scriptingErr("SCRIPT LOAD", err)
		}
	}
	return nil
}
