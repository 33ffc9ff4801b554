package lock

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/baton-run/baton/internal/script"
)

// Handover is a run Set whose holders, on Release, hand their slot to the
// standby that has waited longest, on any host, in one atomic step, and wake
// it at once. A standby waits in line with Await.
type Handover interface {
	Set
	// Await puts the holder of standby slot sb in line for a run slot. The
	// line starts at its first Take.
	Await(sb Slot) (Waiting, error)
}

// Waiting is a standby's place in line for a run slot (Handover.Await).
// One goroutine uses it.
type Waiting interface {
	// Woken gets a value (coalesced) when a run slot may have been handed
	// to this standby: call Take.
	Woken() <-chan struct{}
	// Take hands free run slots (expired, or released with nobody in line)
	// to the standbys that have waited longest, then returns the run slot
	// handed to this one, if any, renewed: (slot, true, nil). Once it has
	// returned a slot the place in line is over.
	Take() (Slot, bool, error)
	// Leave leaves the line and stops Woken. A run slot handed over just
	// before is returned (slot, true, nil): the caller uses or releases it.
	Leave() (Slot, bool, error)
}

// Pair is a run Set that can try a standby set in the same call.
type Pair interface {
	Set
	// TryAcquireOr takes a free run slot or, when every run slot is taken,
	// a free slot of sb: role is RoleRun or RoleStandby, "" when every slot
	// of both is taken. When something broke, err says so and slot is nil.
	TryAcquireOr(sb Set) (slot Slot, role string, err error)
}

var (
	_ Handover = (*LeaseSet)(nil)
	_ Pair     = (*LeaseSet)(nil)
)

// LineKey is the Redis key of queue's line of standbys waiting for a run
// lease (a sorted set by the Redis time each joined).
func LineKey(queue string) string { return "baton:{" + queue + "}:lease:waiting" }

// HandOverTo makes s, a run set, hand its leases of slots below k on
// Release to the standbys of sb waiting in line (Await). Without it, and
// for slots at or above k (min_slots: those are filled by scaling up, not
// by the standbys that keep k covered), a release just frees the lease.
func (s *LeaseSet) HandOverTo(sb *LeaseSet, k int) {
	if s.role == RoleRun && sb != nil && sb.role == RoleStandby && sb.queue == s.queue {
		s.sb, s.handBelow = sb, k
	}
}

// wake is the prefix of a standby's wake channel; its owner id follows.
func (s *LeaseSet) wake() string { return "baton:{" + s.queue + "}:lease:wake:" }

// release deletes the lease or, with standbys paired (HandOverTo), hands it
// to the oldest live one in line.
func (s *LeaseSet) release(ctx context.Context, sl *leaseSlot) error {
	if s.sb == nil || sl.i >= s.handBelow {
		return script.Run(ctx, s.rdb, releaseScript, []string{sl.key, EpochKey(s.queue)}, sl.owner).Err()
	}
	keys := append([]string{sl.key, s.fence, LineKey(s.queue), s.config, EpochKey(s.queue)}, s.sb.keys...)
	return script.Run(ctx, s.rdb, handOverScript, keys, sl.owner, s.opt.TTL.Milliseconds(), s.wake(), sl.i).Err()
}

// Await implements Handover: it subscribes to sb's wake channel, so that no
// hand-over published from now on is missed; the first Take joins the line.
func (s *LeaseSet) Await(sb Slot) (Waiting, error) {
	ls, ok := sb.(*leaseSlot)
	if !ok || s.sb == nil || ls.set != s.sb {
		return nil, fmt.Errorf("lock: await a run lease: %s is not a standby lease of this queue", sb.Name())
	}
	ctx, cancel := context.WithCancel(context.Background())
	ps := s.rdb.Subscribe(ctx, s.wake()+ls.owner)
	if _, err := ps.Receive(ctx); err != nil {
		cancel()
		_ = ps.Close()
		return nil, fmt.Errorf("await a run lease: %w", err)
	}
	w := &waiting{run: s, sb: ls, member: strconv.Itoa(ls.i) + ":" + ls.owner, woken: make(chan struct{}, 1)}
	msgs := ps.Channel()
	w.stop = func() { cancel(); _ = ps.Close() }
	go func() { // ends when ps is closed
		for range msgs {
			select {
			case w.woken <- struct{}{}:
			default:
			}
		}
	}()
	return w, nil
}

// waiting is one standby's place in line; the standby's goroutine owns it.
type waiting struct {
	run    *LeaseSet
	sb     *leaseSlot
	member string
	woken  chan struct{}
	joined bool
	done   bool
	stop   func()
	once   sync.Once
}

func (w *waiting) Woken() <-chan struct{} { return w.woken }

func (w *waiting) Take() (Slot, bool, error) {
	if w.done {
		return nil, false, nil
	}
	mode := "look"
	if !w.joined {
		mode = "join"
	}
	s, ok, err := w.turn(mode)
	if err == nil {
		w.joined = true
	}
	if ok {
		w.end()
	}
	return s, ok, err
}

func (w *waiting) Leave() (Slot, bool, error) {
	defer w.end()
	if w.done || !w.joined {
		return nil, false, nil
	}
	return w.turn("leave")
}

func (w *waiting) end() {
	w.done = true
	w.once.Do(w.stop)
}

// turn runs turnScript in mode; a run lease that is ours comes back renewed,
// its renewals started.
func (w *waiting) turn(mode string) (Slot, bool, error) {
	s := w.run
	ctx, cancel := s.call()
	defer cancel()
	keys := append(append([]string{s.fence, LineKey(s.queue), s.config, EpochKey(s.queue)}, s.keys...), s.sb.keys...)
	sent := sentNow()
	v, err := script.Run(ctx, s.rdb, turnScript, keys,
		s.opt.TTL.Milliseconds(), s.wake(), w.member, mode, s.n, w.sb.owner).Slice()
	if err != nil {
		return nil, false, fmt.Errorf("wait in line for a run lease: %w", err)
	}
	i := toInt(v[0])
	if i < 0 || int(i) >= s.n {
		return nil, false, nil
	}
	return s.held(v, w.sb.owner, sent), true, nil
}

// InLine is a standby waiting in line for a run lease (LeaseSet.Line).
type InLine struct {
	Position int    // 1: handed the next run lease freed
	Slot     int    // its standby slot
	Host     string // its host and pid, as in its standby lease
	PID      int
	Waited   time.Duration // since it joined the line, on Redis' clock
}

// Line reads the line of standbys waiting for a run lease, first in line
// first, without writing anything: only standbys whose standby lease is
// live and their own; stale is how many members a standby that died or
// timed out left behind (dropped by the next hand-over that reaches them).
// s is the queue's standby set.
func (s *LeaseSet) Line() (line []InLine, stale int, err error) {
	if s.role != RoleStandby {
		return nil, 0, fmt.Errorf("lock: the line of %s leases: want the standby set", s.role)
	}
	ctx, cancel := s.call()
	defer cancel()
	v, err := script.Run(ctx, s.rdb, lineScript, append([]string{LineKey(s.queue)}, s.keys...)).Slice()
	if err != nil {
		return nil, 0, fmt.Errorf("read the line of standbys: %w", err)
	}
	now := toInt(v[0])
	for k := 2; k+3 < len(v); k += 4 {
		host, _ := v[k+1].(string)
		line = append(line, InLine{Position: len(line) + 1, Slot: int(toInt(v[k])), Host: host, PID: int(toInt(v[k+2])),
			Waited: time.Duration(max(0, now-toInt(v[k+3]))) * time.Microsecond})
	}
	return line, int(toInt(v[1])), nil
}
