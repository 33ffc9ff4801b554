package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestKeyPersistentChild: persistent children, through the Python and Node
// helpers of examples/, see a keyed job's key as job.key, and "" for a job
// without one (the job frame's key field, docs/workers.md).
func TestKeyPersistentChild(t *testing.T) {
	t.Parallel()
	for _, lang := range []string{"python", "node"} {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			seen := filepath.Join(r.dir, "seen")
			var argv []string
			if lang == "python" {
				worker := filepath.Join(r.dir, "worker.py")
				src := `import sys
sys.path.insert(0, ` + strconv.Quote(filepath.Dir(examplePath(t, "python/baton_worker.py"))) + `)
import baton_worker
def handle(payload, job):
    with open(` + strconv.Quote(seen) + `, "a") as f:
        f.write("%s key=%s\n" % (job.id, job.key))
baton_worker.serve(handle)
`
				if err := os.WriteFile(worker, []byte(src), 0o644); err != nil {
					t.Fatal(err)
				}
				argv = []string{python(t), worker}
			} else {
				worker := filepath.Join(r.dir, "worker.js")
				src := `const fs = require('fs');
const { serve } = require(` + strconv.Quote(examplePath(t, "node/baton-worker.js")) + `);
serve((payload, job) => { fs.appendFileSync(` + strconv.Quote(seen) + `, job.id + ' key=' + job.key + '\n'); });
`
				if err := os.WriteFile(worker, []byte(src), 0o644); err != nil {
					t.Fatal(err)
				}
				argv = []string{"node", worker}
			}
			keyed := r.enqueueOne("--key", "tenant-42", "p1")
			plain := r.enqueueOne("p2")
			h := r.start(append([]string{"run", "--persistent", "--lifetime", "3s", "--jitter", "1ms", "--"}, argv...)...)
			if code := h.wait(t, 30*time.Second); code != 0 {
				t.Fatalf("holder exit %d\n%s", code, h.log())
			}
			got := readLines(t, seen)
			slices.Sort(got)
			want := []string{keyed + " key=tenant-42", plain + " key="}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("the child saw %q, want %q\n%s", got, want, h.log())
			}
		})
	}
}
