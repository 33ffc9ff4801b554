package work

// The settler's part for entries that live in a key's stream (Job.inKey):
// acknowledged, and given back, per stream, as the level streams' entries
// are per level. A holder that reads no key stream never makes one of
// these: the level streams keep their arrays, with no map lookup per job.

// keyedSettle is what waits to be settled in key streams, by stream (an
// entryKey without id); the settler's own.
type keyedSettle struct {
	ack    map[entryKey]*ackBatch
	member map[entryKey]*batchAcks
	backs  map[entryKey][]any
}

func (s *keyedSettle) acks(j *Job) *ackBatch { return batchOf(&s.ack, j) }

func (s *keyedSettle) members(j *Job) *batchAcks { return batchOf(&s.member, j) }

// batchOf is the batch of j's stream in *m, made (with the map) when none.
func batchOf[B any](m *map[entryKey]*B, j *Job) *B {
	at := j.key().at()
	if *m == nil {
		*m = map[entryKey]*B{}
	}
	b := (*m)[at]
	if b == nil {
		b = new(B)
		(*m)[at] = b
	}
	return b
}

func (s *keyedSettle) back(j *Job) {
	if s.backs == nil {
		s.backs = map[entryKey][]any{}
	}
	at := j.key().at()
	s.backs[at] = append(s.backs[at], j.Entry, j.Attempt-1, j.ID)
}

// flush acknowledges every stream's batch (ackKeyed: one script call for
// up to keyAckMost streams; batch members one call per stream), and
// forgets the streams: a holder runs a key's jobs for a while, then
// others' (the batches are not worth keeping for reuse).
func (s *keyedSettle) flush(r *runner) {
	r.ackKeyed(s.ack)
	clear(s.ack)
	for at, b := range s.member {
		r.ackBatchMembers(at, b)
		delete(s.member, at)
	}
}

// giveBack gives back every stream's unstarted entries.
func (s *keyedSettle) giveBack(r *runner) {
	for at, back := range s.backs {
		r.giveBack(at, back)
		delete(s.backs, at)
	}
}

// keyAckMost is the most streams one keyAckScript call acknowledges.
const keyAckMost = 64

// ackKeyed acknowledges the batches of key streams, by stream, in
// keyAckScript calls of up to keyAckMost streams each, and empties them.
func (r *runner) ackKeyed(batches map[entryKey]*ackBatch) {
	var ats []entryKey
	for at, b := range batches {
		if len(b.ids) > 0 {
			ats = append(ats, at)
		}
	}
	for len(ats) > 0 {
		n := min(len(ats), keyAckMost)
		r.ackStreams(ats[:n], batches)
		ats = ats[n:]
	}
}

// ackStreams acknowledges the batches of the streams ats in one script
// call, with the acknowledged jobs' index entries, and empties them.
func (r *runner) ackStreams(ats []entryKey, batches map[entryKey]*ackBatch) {
	total := 0
	for _, at := range ats {
		total += len(batches[at].ids)
	}
	// Even after a panic (logged), the batches are emptied.
	defer func() {
		r.survived(recover(), total)
		for _, at := range ats {
			r.acked(at, batches[at])
		}
	}()
	// The durations go with the first batch: one set of counts per call.
	for _, at := range ats[1:] {
		batches[ats[0]].hist.merge(&batches[at].hist)
	}
	// Per stream: its ackScript KEYS and ARGV, and the index entries of
	// its jobs, taken from those keyForget would drop once they are
	// settled: they go with the acknowledgement.
	var keys []string
	head := []any{len(ats)}
	var body, pairs []any
	r.mu.Lock()
	for _, at := range ats {
		k, a := r.ackArgs(at, batches[at])
		keys = append(keys, k...)
		body = append(body, a...)
		n := len(pairs)
		for _, id := range batches[at].ids {
			at.id = id.(string)
			if job, ok := r.kk.held[at]; ok {
				delete(r.kk.held, at)
				pairs = append(pairs, job, at.id)
			}
		}
		head = append(head, len(k), len(a), (len(pairs)-n)/2)
	}
	r.mu.Unlock()
	keys = append(keys, r.keys.KeyJobs())
	r.writeAck(keyAckScript, keys, append(append(head, body...), pairs...), total)
}
