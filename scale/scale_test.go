package scale

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// table builds a run slot table of n slots; held lists the held ones, and
// draining those of them that are draining.
func table(n int, held []int, draining ...int) []Slot {
	rs := make([]Slot, n)
	for i := range rs {
		rs[i].Slot = i
	}
	for _, i := range held {
		rs[i].Held = true
	}
	for _, i := range draining {
		rs[i].Draining = true
	}
	return rs
}

var pol = Policy{Keep: 1, Slots: 4, Backlog: 100, Age: 10 * time.Second, Every: time.Second, IdleExit: 30 * time.Second}

func TestDecide(t *testing.T) {
	long := time.Hour
	tests := []struct {
		name   string
		p      Policy
		s      State
		action Action
		n      int
		reason string
	}{
		{"off when k = N", Policy{Keep: 4, Slots: 4, Backlog: 100}, State{Known: true, Waiting: 1e6, Slots: table(4, []int{0}), SinceUp: long}, Stay, 0, "nothing to scale"},
		{"burst fills every free slot", pol, State{Known: true, Waiting: 20000, Slots: table(4, []int{0}), SinceUp: long}, Up, 3, "20000 waiting"},
		{"bounded by free slots", pol, State{Known: true, Waiting: 20000, Slots: table(4, []int{0, 2, 3}), SinceUp: long}, Up, 1, "1 of 4 run slots free"},
		{"no free slot", pol, State{Known: true, Waiting: 20000, Slots: table(4, []int{0, 1, 2, 3}), SinceUp: long}, Stay, 0, "no run slot is free"},
		{"as many as the backlog needs", pol, State{Known: true, Waiting: 250, Slots: table(4, []int{0}), SinceUp: long}, Up, 2, "250 waiting"},
		{"backlog under the threshold", pol, State{Known: true, Waiting: 100, Slots: table(4, []int{0}), SinceUp: long}, Stay, 0, "no backlog"},
		{"threshold is per holder", pol, State{Known: true, Waiting: 150, Slots: table(4, []int{0, 1}), SinceUp: long}, Stay, 0, "no backlog"},
		{"old job", pol, State{Known: true, Waiting: 3, Oldest: 12 * time.Second, Slots: table(4, []int{0}), SinceUp: long}, Up, 1, "scale_up_age"},
		{"age off", Policy{Keep: 1, Slots: 4, Backlog: 100, Every: time.Second, IdleExit: time.Minute}, State{Known: true, Waiting: 3, Oldest: time.Hour, Slots: table(4, []int{0}), SinceUp: long}, Stay, 0, "no backlog"},
		{"draining holder never scales", pol, State{Known: true, Waiting: 20000, Slots: table(4, []int{0}, 0), Draining: true, SinceUp: long}, Stay, 0, "draining"},
		{"lowest live holder scales", pol, State{Known: true, Waiting: 20000, Self: 2, Slots: table(4, []int{1, 2}), SinceUp: long}, Stay, 0, "run-1 scales"},
		{"a draining lower holder passes the turn", pol, State{Known: true, Waiting: 20000, Self: 2, Slots: table(4, []int{1, 2}, 1), SinceUp: long}, Up, 2, "20000 waiting"},
		{"one round per scale_up_every", pol, State{Known: true, Waiting: 20000, Slots: table(4, []int{0}), SinceUp: 300 * time.Millisecond}, Stay, 0, "scale_up_every"},
		{"backlog unknown", pol, State{Known: false, Slots: table(4, []int{0}), SinceUp: long}, Stay, 0, "unknown"},
		{"idle above k with k below leaves", pol, State{Known: true, Self: 3, Slots: table(4, []int{0, 3}), Idle: 31 * time.Second}, Leave, 0, "idle"},
		{"idle in a kept slot stays", pol, State{Known: true, Self: 0, Slots: table(4, []int{0, 3}), Idle: time.Hour}, Stay, 0, "no backlog"},
		{"idle above k, kept slot empty: stays", pol, State{Known: true, Self: 3, Slots: table(4, []int{3}), Idle: time.Hour}, Stay, 0, "no backlog"},
		{"idle above k, holder below draining: stays", pol, State{Known: true, Self: 3, Slots: table(4, []int{0, 3}, 0), Idle: time.Hour}, Stay, 0, "no backlog"},
		{"idle above k, not long enough", pol, State{Known: true, Self: 3, Slots: table(4, []int{0, 3}), Idle: 29 * time.Second}, Stay, 0, "no backlog"},
		{"idle but jobs wait", pol, State{Known: true, Waiting: 5, Self: 3, Slots: table(4, []int{0, 3}), Idle: time.Hour}, Stay, 0, "no backlog"},
		{"k = 2 needs two below", Policy{Keep: 2, Slots: 4, Backlog: 100, IdleExit: time.Second}, State{Known: true, Self: 3, Slots: table(4, []int{1, 3}), Idle: time.Hour}, Stay, 0, "no backlog"},
		{"paused queue's backlog starts no one", pol, State{Known: true, Paused: true, Waiting: 20000, Slots: table(4, []int{0}), SinceUp: long}, Stay, 0, "paused"},
		{"idle on a paused queue stays", pol, State{Known: true, Paused: true, Self: 3, Slots: table(4, []int{0, 3}), Idle: time.Hour}, Stay, 0, "paused"},
		{"k = 2, two below", Policy{Keep: 2, Slots: 4, Backlog: 100, IdleExit: time.Second}, State{Known: true, Self: 3, Slots: table(4, []int{1, 2, 3}), Idle: time.Hour}, Leave, 0, "2 holders below"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.p, tt.s)
			if d.Action != tt.action || d.N != tt.n || !strings.Contains(d.Reason, tt.reason) {
				t.Fatalf("Decide = %v (n %d), want %v n %d with %q", d, d.N, tt.action, tt.n, tt.reason)
			}
		})
	}
}

// TestNeverBelowK tries every table of 6 slots with every holder idle, the
// holders deciding one after another in both orders: the holders left are never fewer than
// k, when there were at least k.
func TestNeverBelowK(t *testing.T) {
	const n = 6
	for k := 1; k < n; k++ {
		p := Policy{Keep: k, Slots: n, Backlog: 100, IdleExit: time.Second}
		for mask := 0; mask < 1<<n; mask++ {
			var held []int
			for i := 0; i < n; i++ {
				if mask&(1<<i) != 0 {
					held = append(held, i)
				}
			}
			if len(held) < k {
				continue
			}
			// Holders announce (draining) one after another in index
			// order reversed and in order: both extremes of who sees whom.
			for _, order := range [][]int{held, reversed(held)} {
				rs := table(n, held)
				left := 0
				for _, self := range order {
					if Decide(p, State{Known: true, Self: self, Slots: rs, Idle: time.Hour}).Action != Leave {
						continue
					}
					rs[self].Draining = true
					left++
				}
				if len(held)-left < k {
					t.Fatalf("k %d, held %v, order %v: %d left, %d remain", k, held, order, left, len(held)-left)
				}
			}
		}
	}
}

func reversed(s []int) []int {
	r := make([]int, len(s))
	for i, v := range s {
		r[len(s)-1-i] = v
	}
	return r
}

// TestNeverBelowKInterleaved runs idle holders that read the table, decide
// and announce leaving, then go, in random interleavings: a holder's read
// sees what was announced before it, nothing after (a holder that decided
// to leave but has not announced it yet still counts). The holders left
// running are never fewer than k.
func TestNeverBelowKInterleaved(t *testing.T) {
	const n = 6
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 20000; round++ {
		k := 1 + rng.IntN(n-1)
		p := Policy{Keep: k, Slots: n, Backlog: 100, IdleExit: time.Second}
		rs := table(n, nil)
		held := 0
		for i := range rs {
			if rng.IntN(3) > 0 {
				rs[i].Held = true
				held++
			}
		}
		if held < k {
			continue
		}
		// Each holder's steps: read, decide (and announce), go; steps of
		// different holders interleave at random.
		type step struct{ self, phase int }
		var steps []step
		next := map[int]int{}
		var live []int
		for i := range rs {
			if rs[i].Held {
				live = append(live, i)
			}
		}
		seen := map[int][]Slot{}
		left := 0
		for len(live) > 0 {
			j := rng.IntN(len(live))
			self := live[j]
			switch next[self] {
			case 0:
				seen[self] = append([]Slot(nil), rs...)
			case 1:
				if Decide(p, State{Known: true, Self: self, Slots: seen[self], Idle: time.Hour}).Action == Leave {
					rs[self].Draining = true // announced: others no longer count it
					left++
				}
			case 2:
				if rs[self].Draining {
					rs[self] = Slot{Slot: self} // gone
				}
				live = append(live[:j], live[j+1:]...)
			}
			steps = append(steps, step{self, next[self]})
			next[self]++
		}
		if held-left < k {
			t.Fatalf("k %d: %d held, %d left, %d remain (steps %v)", k, held, left, held-left, steps)
		}
	}
}

func TestNeedsBacklog(t *testing.T) {
	for _, tt := range []struct {
		name string
		s    State
		want bool
		keep int
	}{
		{"the lowest holder scales", State{Self: 0, Slots: table(4, []int{0, 2})}, true, 0},
		{"a higher busy holder does not", State{Self: 2, Slots: table(4, []int{0, 2})}, false, 0},
		{"a higher idle holder may leave", State{Self: 2, Slots: table(4, []int{0, 2}), Idle: time.Hour}, true, 0},
		{"a kept idle holder never leaves", State{Self: 1, Slots: table(4, []int{0, 1}), Idle: time.Hour}, false, 2},
		{"the lower holder drains", State{Self: 2, Slots: table(4, []int{0, 2}, 0)}, true, 0},
		{"draining", State{Self: 0, Slots: table(4, []int{0}, 0), Draining: true}, false, 0},
	} {
		p := pol
		if tt.keep > 0 {
			p.Keep = tt.keep
		}
		if got := NeedsBacklog(p, tt.s); got != tt.want {
			t.Errorf("%s: NeedsBacklog = %v", tt.name, got)
		}
	}
}

// TestLastNeverFollowsPlantedLink: a link planted in the lock dir at the
// temporary name the state file used to be written to, pointing at a file of
// the holder's user, is neither written through nor left as the state file.
func TestLastNeverFollowsPlantedLink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := lastPath(dir, "q")
	for _, p := range []string{path + "." + strconv.Itoa(os.Getpid()) + ".tmp", path} {
		if err := os.Symlink(victim, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := (Last{Decision: "up 1: test", PID: os.Getpid()}).Write(dir, "q"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Fatalf("victim overwritten: %q", b)
	}
	if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("state file %v, %v: want a regular file", fi, err)
	}
	if l := ReadLast(dir, "q"); l == nil || l.Decision != "up 1: test" {
		t.Fatalf("read back %+v", l)
	}
}
