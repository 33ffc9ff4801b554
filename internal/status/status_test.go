package status

import "testing"

func TestJobs(t *testing.T) {
	for n, want := range map[int64]string{0: "0 jobs", 1: "1 job", 2: "2 jobs", 1000: "1000 jobs"} {
		if got := Jobs(n); got != want {
			t.Errorf("Jobs(%d) = %q, want %q", n, got, want)
		}
	}
}
