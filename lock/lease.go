package lock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-run/baton/internal/script"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"
)

// LeaseOptions' defaults, and the lease_ttl and lease_renew keys'
// (internal/config.Default).
const (
	DefaultLeaseTTL   = 15 * time.Second
	DefaultLeaseRenew = 2 * time.Second
)

// LeaseOptions are a lease set's timings and the holder's identity.
type LeaseOptions struct {
	// Host names this machine in lease records (BATON_HOST). Default: the hostname.
	Host string
	// TTL is how long a grant or a renewal lasts on Redis' clock. Default 15s.
	TTL time.Duration
	// Renew is the time between renewals. Default 2s.
	Renew time.Duration
	// Deadline is the renew deadline: a holder whose last successful
	// renewal was sent longer ago than this (on its own boot clock, time
	// suspended included) closes Lost. Must be below TTL, so the holder
	// stops before its lease can be granted again. Default 2/3 of TTL.
	Deadline time.Duration
	// Agree are the settings every holder of the queue must share, e.g.
	// slots, standby_slots, lease_ttl, lease_renew, by their config names:
	// TryAcquire refuses with a *ConfigMismatchError while leases granted
	// under other values may still be valid (docs/fleet.md). Default none.
	Agree []Setting
}

// Setting is one named value of LeaseOptions.Agree, as the config spells it.
type Setting struct{ Name, Value string }

// ConfigMismatchError is a candidate refused because one of its settings
// differs from the fleet's: Name is the setting, Ours this host's value and
// Fleet the value of the leases in force.
type ConfigMismatchError struct {
	Queue, Name, Ours, Fleet string
}

func (e *ConfigMismatchError) Error() string {
	return fmt.Sprintf("queue %s: %s is %s here but %s in the fleet's leases in force: every host must use the same value", e.Queue, e.Name, e.Ours, e.Fleet)
}

// DeadlineFor is the default renew deadline for a lease TTL: two thirds of it
// (10s for the default 15s, as Kubernetes leader election's 15s/10s/2s).
func DeadlineFor(ttl time.Duration) time.Duration { return ttl * 2 / 3 }

// ErrLeaseOrder is the error of timings out of the safe order TTL > renew
// deadline > renew interval.
var ErrLeaseOrder = errors.New("lease timings out of order")

// CheckLeaseOrder reports timings that do not keep TTL > deadline > renew,
// each with the numbers: a renew deadline at or past the TTL lets a holder
// act after its lease went to someone else; a renew interval at or past the
// deadline fences a holder that misses nothing.
func CheckLeaseOrder(ttl, deadline, renew time.Duration) error {
	switch {
	case renew <= 0:
		return fmt.Errorf("%w: lease_renew %s must be positive", ErrLeaseOrder, renew)
	case deadline >= ttl:
		return fmt.Errorf("%w: renew deadline %s must be below lease_ttl %s, or a holder that cannot renew may still run jobs after its lease was granted to another", ErrLeaseOrder, deadline, ttl)
	case renew >= deadline:
		return fmt.Errorf("%w: lease_renew %s must be below the renew deadline %s (2/3 of lease_ttl %s), or one late renewal fences a healthy holder", ErrLeaseOrder, renew, deadline, ttl)
	}
	return nil
}

// LeaseSet is a Set of Redis leases shared by every host using the same
// Redis and queue: baton:{queue}:lease:<role>:<i>, all under the queue's hash
// tag. Grants carry a fencing token from one counter per queue
// (baton:{queue}:lease:fence), so tokens only grow, per slot and overall.
type LeaseSet struct {
	rdb         redis.UniversalClient
	queue, role string
	n           int
	keys        []string
	fence       string
	config      string
	sb          *LeaseSet // standbys that run leases are handed to (HandOverTo); nil: none
	handBelow   int       // only slots below this are handed to standbys
	opt         LeaseOptions
	pid         int
}

var (
	_ Set     = (*LeaseSet)(nil)
	_ Fencer  = (*leaseSlot)(nil)
	_ Holding = (*leaseSlot)(nil)
)

// Holding is a Slot that tells, by the holder's own clocks and without
// asking anyone, whether it still surely holds the slot: a lease whose renew
// deadline has not passed since its last confirmed renewal was sent. Its
// lease cannot have expired then (the deadline is below the TTL), so no
// other holder can have it. A holder asks before it reads jobs and before
// it starts one: stopped (SIGSTOP, a paused VM) past its lease and resumed,
// it reads and starts nothing, even before its watchdog closes Lost.
type Holding interface {
	// HeldFor is how much longer the slot is surely held: the renew
	// deadline less the time since the last confirmed renewal was sent, on
	// the boot clock (time suspended included); 0 or less once it passed.
	// It reads the clock: a system call, for each read, not each job.
	HeldFor() time.Duration
	// HeldAt reports whether the slot is still surely held at now, a
	// time.Now() the caller read already: free, on the monotonic clock,
	// which counts a stopped process's time but not a system suspend (the
	// watchdog and HeldFor see that).
	HeldAt(now time.Time) bool
}

// Fencer is a Slot whose writes can be fenced: Fence is the Redis key of its
// lease and the fencing token of this tenure. A script that writes for the
// holder checks, in the same call, that the lease still carries the token
// and has not expired.
type Fencer interface {
	Fence() (key string, token int64)
}

// LeaseKey is the Redis key of slot i's lease of role in queue.
func LeaseKey(queue, role string, i int) string {
	return "baton:{" + queue + "}:lease:" + role + ":" + strconv.Itoa(i)
}

// FenceKey is the Redis key of queue's fencing counter.
func FenceKey(queue string) string { return "baton:{" + queue + "}:lease:fence" }

// EpochKey is the Redis key that records which server last granted queue's
// leases, and until when grants are paused after a failover, a restart or
// a loss of data, and each lease's expiry (a field per lease key). Its
// absence marks a server that lost the queue's lease state (or never had
// it): baton never deletes it.
func EpochKey(queue string) string { return "baton:{" + queue + "}:lease:epoch" }

// ConfigKey is the Redis key of the settings queue's leases were granted
// under (LeaseOptions.Agree).
func ConfigKey(queue string) string { return "baton:{" + queue + "}:lease:config" }

// NewLeaseSet describes a set of n leases; it touches nothing in Redis.
func NewLeaseSet(rdb redis.UniversalClient, queue, role string, n int, opt LeaseOptions) (*LeaseSet, error) {
	if role != RoleRun && role != RoleStandby {
		return nil, fmt.Errorf("lock: unknown role %q", role)
	}
	if n < 1 {
		return nil, fmt.Errorf("lock: %s set of %d slots", role, n)
	}
	if opt.Host == "" {
		opt.Host, _ = os.Hostname()
	}
	if opt.TTL <= 0 {
		opt.TTL = DefaultLeaseTTL
	}
	if opt.Renew <= 0 {
		opt.Renew = DefaultLeaseRenew
	}
	if opt.Deadline <= 0 {
		opt.Deadline = DeadlineFor(opt.TTL)
	}
	if err := CheckLeaseOrder(opt.TTL, opt.Deadline, opt.Renew); err != nil {
		return nil, err
	}
	s := &LeaseSet{rdb: rdb, queue: queue, role: role, n: n, fence: FenceKey(queue), config: ConfigKey(queue),
		opt: opt, pid: os.Getpid()}
	for i := 0; i < n; i++ {
		s.keys = append(s.keys, LeaseKey(queue, role, i))
	}
	return s, nil
}

// Size implements Set.
func (s *LeaseSet) Size() int { return s.n }

// Lowest implements Set: the same leases.
func (s *LeaseSet) Lowest(k int) (Set, error) {
	c := *s
	c.n, c.keys = k, s.keys[:k:k]
	return &c, nil
}

// Capabilities implements Set: leases take a run or a standby slot in one
// call, hand run slots to the line of standbys, and are read in Redis.
// Nobody evicts a lease: it expires.
func (s *LeaseSet) Capabilities() Capabilities {
	return Capabilities{Pair: s, Handover: s, Fleet: s, Remote: true}
}

// Options are the set's timings and host, defaults filled in.
func (s *LeaseSet) Options() LeaseOptions { return s.opt }

// call bounds one lease call by the renew deadline: past it the answer is
// of no use.
func (s *LeaseSet) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.opt.Deadline)
}

// TryAcquire implements Set: one script call tries every lease, from a
// random one. A reply lost after a grant leaves a lease that nobody renews:
// it expires after TTL.
func (s *LeaseSet) TryAcquire() (Slot, bool, error) {
	sl, err := s.acquire(nil)
	if sl == nil {
		return nil, false, err
	}
	return sl, true, nil
}

// TryAcquireOr implements Pair: with sb the standby set s hands over to
// (HandOverTo), both sets are tried in one script call, so a candidate that
// wins nothing asks Redis once; with any other set, one call per set.
func (s *LeaseSet) TryAcquireOr(sb Set) (Slot, string, error) {
	if other, ok := sb.(*LeaseSet); !ok || other != s.sb {
		if sl, ok, err := s.TryAcquire(); ok || err != nil {
			return sl, s.role, err
		}
		if sl, ok, err := sb.TryAcquire(); ok || err != nil {
			return sl, RoleStandby, err
		}
		return nil, "", nil
	}
	sl, err := s.acquire(s.sb)
	if sl == nil {
		return nil, "", err
	}
	return sl, sl.set.role, nil
}

// acquire runs acquireScript on s's leases and then, when not nil, or's:
// the slot won, or nil.
func (s *LeaseSet) acquire(or *LeaseSet) (*leaseSlot, error) {
	ctx, cancel := s.call()
	defer cancel()
	owner := newOwner()
	sent := sentNow()
	keys := append([]string{s.fence, s.config, EpochKey(s.queue)}, s.keys...)
	firstOr := 0
	if or != nil {
		keys = append(keys, or.keys...)
		firstOr = mrand.IntN(or.n)
	}
	args := []any{s.opt.TTL.Milliseconds(), owner, s.opt.Host, s.pid, mrand.IntN(s.n), s.n, firstOr}
	for _, a := range s.opt.Agree {
		args = append(args, a.Name, a.Value)
	}
	v, err := script.Run(ctx, s.rdb, acquireScript, keys, args...).Slice()
	if err != nil {
		if or != nil {
			return nil, fmt.Errorf("acquire %s or %s lease: %w", s.role, or.role, err)
		}
		return nil, fmt.Errorf("acquire %s lease: %w", s.role, err)
	}
	i := toInt(v[0])
	if i == -2 {
		return nil, s.mismatch(v)
	}
	if i < 0 {
		return nil, nil
	}
	set := s
	if toInt(v[6]) == 1 && or != nil {
		set = or
	}
	return set.held(v, owner, sent), nil
}

// held starts holding the lease a script granted: v is its reply {slot,
// token, since, expires, previous holder's rec or ""}, owner the tenure's
// id, sent the clocks when the call was sent (the renew deadline counts
// from there).
func (s *LeaseSet) held(v []any, owner string, sent sendTime) *leaseSlot {
	i := int(toInt(v[0]))
	sl := &leaseSlot{set: s, i: i, key: s.keys[i], owner: owner, token: toInt(v[1]),
		since: time.UnixMilli(toInt(v[2])), lost: make(chan struct{}), stop: make(chan struct{})}
	sl.okAt.Store(int64(sent.boot))
	sl.okMt.Store(int64(sent.mono))
	if prev, _ := v[4].(string); prev != "" {
		var r Record
		if json.Unmarshal([]byte(prev), &r) == nil && r.Held {
			r.Slot = sl.i
			sl.prev = &r
		}
	}
	sl.start()
	return sl
}

// mismatch is the error of acquireScript's {-2, name, the fleet's value}.
func (s *LeaseSet) mismatch(v []any) error {
	e := &ConfigMismatchError{Queue: s.queue}
	e.Name, _ = v[1].(string)
	e.Fleet, _ = v[2].(string)
	for _, a := range s.opt.Agree {
		if a.Name == e.Name {
			e.Ours = a.Value
		}
	}
	return e
}

// Records implements Set: every lease at one instant of Redis' clock, in one
// call. Since is the grant time and ExpiresIn the time left, both on Redis'
// clock; an expired lease reads as free.
func (s *LeaseSet) Records() ([]Record, error) {
	ctx, cancel := s.call()
	defer cancel()
	v, err := script.Run(ctx, s.rdb, recordsScript, s.keys).Slice()
	if err != nil {
		return nil, fmt.Errorf("read %s leases: %w", s.role, err)
	}
	now := toInt(v[0])
	out := make([]Record, s.n)
	for i := range out {
		f := v[1+6*i : 7+6*i]
		exp := toInt(f[5])
		if f[5] == nil || exp <= now {
			out[i] = Record{Slot: i}
			continue
		}
		var r Record
		if rec, _ := f[0].(string); rec == "" || json.Unmarshal([]byte(rec), &r) != nil {
			r = Record{NoRecord: true}
		}
		r.Slot, r.Held, r.Role = i, true, s.role
		r.Fence = toInt(f[1])
		r.Host, _ = f[2].(string)
		r.PID = int(toInt(f[3]))
		r.Since = time.UnixMilli(toInt(f[4]))
		r.ExpiresIn = time.Duration(exp-now) * time.Millisecond
		out[i] = r
	}
	return out, nil
}

// MarkFresh records that the Redis server rdb reaches has never granted
// queue's leases, so that its first grants are not paused: a server that
// holds none of the queue's lease state has either lost it (a restart
// without persistence, a FLUSHALL, a FLUSHDB, a failover to a replica that
// never had it, a DEL of baton's keys) or never had it, and cannot tell
// which, so its grants otherwise wait a lease TTL from the first candidate
// that looks (docs/fleet.md). Only for a server no holder of the queue ever
// used: tests, or a new deployment started before any baton. It writes
// nothing, and returns false, when the server holds lease state of the
// queue. The mark is the lease state itself: a later loss takes it too,
// and is paused for like any other.
func MarkFresh(ctx context.Context, rdb redis.UniversalClient, queue string) (bool, error) {
	n, err := script.Run(ctx, rdb, freshScript, []string{EpochKey(queue), FenceKey(queue)}).Int64()
	if err != nil {
		return false, fmt.Errorf("mark redis fresh for queue %s: %w", queue, err)
	}
	return n == 1, nil
}

// PausedFor is how much longer grants stay paused after a failover, a
// restart or a loss of data of Redis (0 when they are not), on Redis'
// clock; see docs/fleet.md.
func (s *LeaseSet) PausedFor() (time.Duration, error) {
	ctx, cancel := s.call()
	defer cancel()
	v, err := script.Run(ctx, s.rdb, pausedScript, []string{EpochKey(s.queue)}).Slice()
	if err != nil {
		return 0, fmt.Errorf("read %s lease pause: %w", s.role, err)
	}
	return time.Duration(max(0, toInt(v[1])-toInt(v[0]))) * time.Millisecond, nil
}

// leaseSlot is one held lease. Its renew and watchdog goroutines are
// started by TryAcquire and stopped by Release.
type leaseSlot struct {
	set   *LeaseSet
	i     int
	key   string
	owner string
	token int64
	since time.Time
	prev  *Record
	okAt  atomic.Int64 // boot clock (ns) when the last successful grant or renewal was sent
	okMt  atomic.Int64 // the same send on the monotonic clock (monoNow)

	lost     chan struct{} // closed once by lose
	lostOnce sync.Once
	why      atomic.Pointer[string]
	stop     chan struct{} // closed by Release
	wg       sync.WaitGroup
	once     sync.Once
}

func (sl *leaseSlot) Index() int            { return sl.i }
func (sl *leaseSlot) Name() string          { return sl.set.role + "-" + strconv.Itoa(sl.i) }
func (sl *leaseSlot) Lost() <-chan struct{} { return sl.lost }
func (sl *leaseSlot) Inherited() *Record    { return sl.prev }

// Fence implements Fencer.
func (sl *leaseSlot) Fence() (string, int64) { return sl.key, sl.token }

// LostReason says why Lost closed ("" while held).
func (sl *leaseSlot) LostReason() string {
	if p := sl.why.Load(); p != nil {
		return *p
	}
	return ""
}

// Publish implements Slot: the record goes into the lease, if still ours.
func (sl *leaseSlot) Publish(r Record) error {
	r.Slot, r.Held = sl.i, true
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	ctx, cancel := sl.set.call()
	defer cancel()
	n, err := script.Run(ctx, sl.set.rdb, publishScript, []string{sl.key}, sl.owner, b).Int64()
	if err != nil {
		return fmt.Errorf("publish %s record: %w", sl.Name(), err)
	}
	if n == 0 {
		return fmt.Errorf("publish %s record: the lease is no longer ours", sl.Name())
	}
	return nil
}

// Release implements Slot: it stops renewing and, if the lease is still
// ours, hands it to the oldest standby in line (HandOverTo) or deletes it.
// Safe to call twice.
func (sl *leaseSlot) Release() error {
	var err error
	sl.once.Do(func() {
		close(sl.stop)
		sl.wg.Wait()
		ctx, cancel := sl.set.call()
		defer cancel()
		err = sl.set.release(ctx, sl)
	})
	return err
}

// start starts the renewer and the watchdog. The renewer sends a renewal
// Renew after the last one was sent (at once again after an error: renew
// is idempotent for the same owner) and waits for each reply long enough
// for a slow link's late reply to count (renew).
// The watchdog closes lost once the last confirmed renewal was sent more
// than Deadline ago on the boot clock: CLOCK_BOOTTIME counts time
// suspended, so a holder resumed after a pause finds its deadline passed
// at its first look.
func (sl *leaseSlot) start() {
	opt := sl.set.opt
	ctx, cancel := context.WithCancel(context.Background())
	sl.wg.Add(3)
	go func() { // Release cancels a renewal in flight
		defer sl.wg.Done()
		<-sl.stop
		cancel()
	}()
	go func() {
		defer sl.wg.Done()
		next := time.Duration(sl.okAt.Load()) + opt.Renew // boot clock of the next send
		var rtt time.Duration                             // the last confirmed renewal's round trip
		for {
			select {
			case <-sl.stop:
				return
			case <-sl.lost:
				return
			case <-time.After(next - boottime()):
			}
			sent, sentMono := boottime(), monoNow()
			exp, err := sl.renew(ctx, sent, rtt)
			switch {
			case err != nil:
				next = boottime() + min(opt.Renew, max(opt.Deadline/10, 50*time.Millisecond))
			case exp == 0:
				sl.lose("lease lost: expired or taken by another holder")
				return
			default:
				if int64(sent) > sl.okAt.Load() {
					sl.okMt.Store(int64(sentMono))
					sl.okAt.Store(int64(sent))
				}
				rtt = boottime() - sent
				next = sent + opt.Renew
			}
		}
	}()
	go func() {
		defer sl.wg.Done()
		tick := min(opt.Renew/4, 50*time.Millisecond)
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-sl.stop:
				return
			case <-t.C:
			}
			if boottime()-time.Duration(sl.okAt.Load()) >= opt.Deadline {
				sl.lose(fmt.Sprintf("renew deadline %s passed without a confirmed renewal (lease_ttl %s)", opt.Deadline, opt.TTL))
				return
			}
		}
	}()
}

// renew sends one renewal at sent (boot clock) and waits for its reply for
// half the time left before the renew deadline, or twice rtt (the last
// round trip) if longer, never past the deadline: a slow link's reply
// still arrives, and a reply lost with a connection that died silently
// leaves room to send again on another (the client drops a connection
// whose call timed out). Returns the new expiry, 0 when the lease is no
// longer ours.
func (sl *leaseSlot) renew(ctx context.Context, sent, rtt time.Duration) (int64, error) {
	opt := sl.set.opt
	left := time.Duration(sl.okAt.Load()) + opt.Deadline - sent
	ctx, cancel := context.WithTimeout(ctx, max(min(left, max(left/2, 2*rtt)), 10*time.Millisecond))
	defer cancel()
	return script.Run(ctx, sl.set.rdb, renewScript, []string{sl.key, sl.set.config, EpochKey(sl.set.queue)}, sl.owner, opt.TTL.Milliseconds()).Int64()
}

// HeldFor implements Holding: the watchdog's own test, asked at once.
func (sl *leaseSlot) HeldFor() time.Duration {
	return time.Duration(sl.okAt.Load()) + sl.set.opt.Deadline - boottime()
}

// HeldAt implements Holding.
func (sl *leaseSlot) HeldAt(now time.Time) bool {
	return now.Sub(monoBase) < time.Duration(sl.okMt.Load())+sl.set.opt.Deadline
}

func (sl *leaseSlot) lose(why string) {
	sl.lostOnce.Do(func() {
		sl.why.Store(&why)
		close(sl.lost)
	})
}

// sendTime is when a grant or renewal was sent, on both clocks.
type sendTime struct{ boot, mono time.Duration }

func sentNow() sendTime { return sendTime{boottime(), monoNow()} }

// monoBase is the origin of monoNow.
var monoBase = time.Now()

// monoNow is the monotonic clock (Go's, CLOCK_MONOTONIC): it reads as fast
// as time.Now, and counts a stopped process's time, not a system suspend.
func monoNow() time.Duration { return time.Since(monoBase) }

// boottime is CLOCK_BOOTTIME: monotonic, and counting time suspended.
func boottime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return time.Duration(time.Now().UnixNano()) // cannot happen on Linux ≥ 2.6.39
	}
	return time.Duration(ts.Nano())
}

func newOwner() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// toInt reads a script's integer or numeric string reply; 0 for anything else.
func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}
