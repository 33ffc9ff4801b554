package sim

import "time"

// kind is what an event does.
type kind uint8

const (
	evFiring  kind = iota // cron fires: schedule the candidates' arrivals
	evArrive              // a candidate has started and tries the slots
	evRelease             // a holder leaves its run slot (lifetime + drain, or hard deadline)
	evCrash               // a holder dies at once
	evHang                // a holder stops making progress
	evPoll                // a standby tries the run slots at a poll (no watcher)
	evWake                // a standby tries the run slots, woken by a change
	evTimeout             // a standby gives up after S
)

// event happens at t to process pid of generation gen; an event whose gen no
// longer matches the process is stale and ignored.
type event struct {
	t     time.Duration
	seq   uint64 // insertion order: breaks ties so runs are deterministic
	kind  kind
	pid   int32
	gen   uint32
	lines uint16 // evFiring: crontab lines firing at t
}

// queue is a binary min-heap of events by (t, seq), without container/heap's
// interface calls: the simulation spends most of its time here.
type queue struct {
	ev  []event
	seq uint64
}

func (q *queue) len() int { return len(q.ev) }

func (q *queue) push(e event) {
	q.seq++
	e.seq = q.seq
	q.ev = append(q.ev, e)
	i := len(q.ev) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q.ev[i], q.ev[p] = q.ev[p], q.ev[i]
		i = p
	}
}

func (q *queue) pop() event {
	top := q.ev[0]
	n := len(q.ev) - 1
	q.ev[0] = q.ev[n]
	q.ev = q.ev[:n]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && q.less(l, m) {
			m = l
		}
		if r < n && q.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		q.ev[i], q.ev[m] = q.ev[m], q.ev[i]
		i = m
	}
	return top
}

func (q *queue) less(i, j int) bool {
	a, b := &q.ev[i], &q.ev[j]
	return a.t < b.t || a.t == b.t && a.seq < b.seq
}
