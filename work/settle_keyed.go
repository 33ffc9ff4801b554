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

func (s *keyedSettle) acks(j *Job) *ackBatch {
	at := j.key().at()
	b := s.ack[at]
	if b == nil {
		if s.ack == nil {
			s.ack = map[entryKey]*ackBatch{}
		}
		b = new(ackBatch)
		s.ack[at] = b
	}
	return b
}

func (s *keyedSettle) members(j *Job) *batchAcks {
	at := j.key().at()
	b := s.member[at]
	if b == nil {
		if s.member == nil {
			s.member = map[entryKey]*batchAcks{}
		}
		b = new(batchAcks)
		s.member[at] = b
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

// flush acknowledges every stream's batch, one script call per stream,
// and forgets the streams: a holder runs a key's jobs for a while, then
// others' (the batches are not worth keeping for reuse).
func (s *keyedSettle) flush(r *runner) {
	for at, b := range s.ack {
		r.ack(at, b)
		delete(s.ack, at)
	}
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
