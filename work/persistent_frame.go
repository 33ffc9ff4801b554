package work

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// The worker protocol (docs/workers.md). Baton writes frames to the child's
// fd 3 and reads the child's frames from its fd 4; stdin, stdout and stderr
// are not part of it, so a stray print cannot corrupt it. A frame is one line
// of JSON (the header, never holding a raw newline: JSON escapes them), then
// exactly header.size raw bytes: any payload round-trips byte for byte.
const (
	// ProtocolVersion is the version baton speaks, given to the child as
	// BATON_PROTOCOL.
	ProtocolVersion = 1

	frameReady     = "ready"     // child: started, waiting for jobs
	frameJob       = "job"       // baton: id, seq, attempt, queue, size + payload
	frameResult    = "result"    // child: id, seq, status ok|error|skip, error, size + the job's result (status ok)
	frameHeartbeat = "heartbeat" // child: id, seq: still working on the job
	frameProgress  = "progress"  // child: id, seq, pct, msg: how far the job is (a heartbeat too)
	frameCancel    = "cancel"    // baton: id, seq: the job was cancelled: stop it and answer with its result
	frameStop      = "stop"      // baton: finish and exit 0

	statusOK    = "ok"    // done: acknowledged
	statusError = "error" // failed: retried with backoff
	statusSkip  = "skip"  // failed for good: dead-lettered as rejected

	maxHeader = 64 << 10 // longest header line
	maxBody   = 16 << 20 // largest body a child may send: a result (result_max is at most this)
)

// frame is one protocol message; fields not used by its type are omitted.
type frame struct {
	Type     string `json:"type"`
	ID       string `json:"id,omitempty"`
	Seq      uint64 `json:"seq,omitempty"` // the delivery a job frame starts and a result or heartbeat names
	Attempt  int    `json:"attempt,omitempty"`
	Queue    string `json:"queue,omitempty"`
	Status   string `json:"status,omitempty"`
	Error    string `json:"error,omitempty"`
	Protocol int    `json:"protocol,omitempty"`
	Size     int    `json:"size,omitempty"`
	Tick     string `json:"tick,omitempty"`     // a periodic job's tick, RFC 3339
	Periodic string `json:"periodic,omitempty"` // a periodic job's entry name
	Key      string `json:"key,omitempty"`      // a keyed job's key (docs/keys.md)
	Pct      *int   `json:"pct,omitempty"`      // a progress frame's percentage, 0 to 100
	Msg      string `json:"msg,omitempty"`      // a progress frame's message
	// The job's W3C trace context (Job.TraceParent), for the child's spans.
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
	// Batch and BatchSummary: a batch callback's batch id and summary
	// (work.BatchSummary as JSON).
	Batch        string          `json:"batch,omitempty"`
	BatchSummary json.RawMessage `json:"batch_summary,omitempty"`
	body         []byte
}

// errProtocol is a child that broke the framing or spoke out of turn.
var errProtocol = errors.New("worker protocol error")

// encode returns the frame's header line and body, ready to write.
func (f *frame) encode() [][]byte {
	f.Size = len(f.body)
	h, _ := json.Marshal(f) // strings and ints only: never fails
	h = append(h, '\n')
	if len(f.body) == 0 {
		return [][]byte{h}
	}
	return [][]byte{h, f.body}
}

// readFrame reads one frame: io.EOF at a clean end, an errProtocol for
// anything that is not a frame.
func readFrame(r *bufio.Reader) (frame, error) {
	var f frame
	line, err := r.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return f, fmt.Errorf("%w: header longer than %d bytes", errProtocol, maxHeader)
	case err == io.EOF && len(line) > 0:
		return f, fmt.Errorf("%w: header cut off: %q", errProtocol, clip(line))
	case err != nil:
		return f, err
	}
	if err := json.Unmarshal(line, &f); err != nil || f.Type == "" {
		return f, fmt.Errorf("%w: not a frame header: %q", errProtocol, clip(line))
	}
	if f.Size < 0 || f.Size > maxBody {
		return f, fmt.Errorf("%w: body size %d out of range", errProtocol, f.Size)
	}
	if f.Size > 0 {
		f.body = make([]byte, f.Size)
		if _, err := io.ReadFull(r, f.body); err != nil {
			return f, fmt.Errorf("%w: body cut off: %v", errProtocol, err)
		}
	}
	return f, nil
}

// clip shortens a bad header for an error message.
func clip(b []byte) []byte {
	b = bytes.TrimSpace(b)
	if len(b) > 80 {
		return append(b[:80:80], "..."...)
	}
	return b
}
