package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

// The block of docs/benchmarks.md that -docs rewrites.
const (
	docsBegin = "<!-- bench:begin (written by make bench; edit outside this block) -->"
	docsEnd   = "<!-- bench:end -->"
)

// checkDocs fails early, before minutes of measuring, when path lacks the markers.
func checkDocs(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	if i, j := strings.Index(s, docsBegin), strings.Index(s, docsEnd); i < 0 || j < i {
		return fmt.Errorf("%s: markers %q and %q not found", path, docsBegin, docsEnd)
	}
	return nil
}

// writeDocs replaces the text between the markers with the machine, the
// command and the tables; the rest of the file is left as it is.
func writeDocs(path string, m machine, cfg runConfig, r *results) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(old)
	i, j := strings.Index(s, docsBegin), strings.Index(s, docsEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s: markers %q and %q not found", path, docsBegin, docsEnd)
	}
	var b bytes.Buffer
	b.WriteString(docsBegin + "\n\n")
	fmt.Fprintf(&b, "Measured %s with `make bench` (%d runs per figure; %d jobs per throughput run, %d per exec run).\n\n",
		m.Date, cfg.Runs, cfg.Jobs, cfg.ExecJobs)
	fmt.Fprintf(&b, "Machine: %s.\n\n", m)
	r.writeTable(&b)
	b.WriteString("\n")
	out := s[:i] + b.String() + s[j:]
	return os.WriteFile(path, []byte(out), 0o644)
}
