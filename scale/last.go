package scale

import (
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	"github.com/baton-run/baton/internal/atomicfile"
)

// Last is the newest scale-up or scale-down of a queue, for status:
// <lock_dir>/<queue>.scale.json, replaced by rename by the holder deciding.
type Last struct {
	Decision string    `json:"decision"` // "up 3: ..." or "leave: ..."
	Slot     int       `json:"slot"`     // the run slot of the holder that decided
	PID      int       `json:"pid"`
	At       time.Time `json:"at"`
	Waiting  int64     `json:"waiting"`
	Oldest   string    `json:"oldest_waiting"`
}

func lastPath(dir, queue string) string { return filepath.Join(dir, queue+".scale.json") }

// Write replaces the queue's last decision by rename.
func (l Last) Write(dir, queue string) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	// Created exclusively under a random name, never through a link
	// planted in the lock dir.
	return atomicfile.Write(lastPath(dir, queue), b, 0o640)
}

// ReadLast reads the queue's last scale decision, nil when none.
func ReadLast(dir, queue string) *Last {
	b, err := os.ReadFile(lastPath(dir, queue))
	if err != nil {
		return nil
	}
	var l Last
	if json.Unmarshal(b, &l) != nil {
		return nil
	}
	return &l
}
