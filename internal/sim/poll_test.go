package sim

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestFirstOfMatchesRenewal compares the closed-form draw of the earliest
// next poll among n standbys with brute force: n renewal processes with gaps
// uniform in [0.9, 1.1] × P, run far from their start, and the first poll
// after a fixed instant.
func TestFirstOfMatchesRenewal(t *testing.T) {
	const samples = 4000
	poll := 500 * time.Millisecond
	s := &state{q: base(), rng: rand.New(rand.NewPCG(3, 4))}
	s.q.Poll = poll
	brute := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 2, 5, 20} {
		var drawn, direct float64
		for i := 0; i < samples; i++ {
			drawn += float64(s.firstOf(n))
			first := math.Inf(1)
			for j := 0; j < n; j++ {
				at := brute.Float64() * float64(poll) // a start anywhere in the first gap
				for at <= 100*float64(poll) {
					at += float64(poll) * (0.9 + 0.2*brute.Float64())
				}
				first = min(first, at-100*float64(poll))
			}
			direct += first
		}
		drawn, direct = drawn/samples, direct/samples
		if math.Abs(drawn-direct) > 0.04*direct {
			t.Errorf("n=%d: mean earliest poll %v drawn, %v by brute force", n, time.Duration(drawn), time.Duration(direct))
		}
	}
}
