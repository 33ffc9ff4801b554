package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/baton-run/baton/work"
)

// afterOption reads --after: job ids, comma-separated or the flag repeated.
func afterOption(ids []string) (work.Option, error) {
	var clean []string
	for _, id := range ids {
		if id = strings.TrimSpace(id); id != "" {
			clean = append(clean, id)
		}
	}
	if len(clean) == 0 {
		return nil, usagef("e.g. --after 1795277752922-0", "enqueue: --after: give a job id")
	}
	for _, id := range clean {
		if !work.IsDependency(id) {
			return nil, usagef("", "enqueue: --after %q: not a job id (they look like 1795277752922-0, or QUEUE:1795277752922-0 for another queue's); nothing added", id)
		}
	}
	return work.After(clean...), nil
}

// chainErr turns the caller's mistakes of a chained enqueue (a job to
// wait for that is not on the queue, a cycle) into one line and exit 2,
// when nothing of the chunk was added. start is the chunk's first job.
func chainErr(err error, ids []string, start int) (error, bool) {
	if !errors.Is(err, work.ErrNoDependency) && !errors.Is(err, work.ErrBadOption) {
		return nil, false
	}
	for _, id := range ids {
		if id != "" {
			return nil, false // some were added: a runtime failure, reported as such
		}
	}
	if start > 0 {
		return usagef("", "enqueue: %v; the %d jobs before were added, nothing more", err, start), true
	}
	return usagef("", "enqueue: %v; nothing added", err), true
}

// dependencyFailed says on warn which jobs were dead-lettered at once
// because a job they wait for was dead (they are added, their ids
// printed); false when err is not that.
func dependencyFailed(warn io.Writer, ids []string, err error) bool {
	var de *work.DependencyError
	if !errors.As(err, &de) {
		return false
	}
	for n, i := range de.Jobs {
		dep, requeue := de.Deps[n], de.Deps[n]
		if q, id, ok := strings.Cut(dep, ":"); ok && strings.Count(dep, ":") == 1 {
			requeue = "--queue " + q + " " + id
		}
		fmt.Fprintf(warn, "baton: enqueue: job %s dead-lettered at once (%s): job %s, which it waits for, is dead; 'baton dead requeue %s', then 'baton dead requeue %s'\n",
			ids[i], work.ReasonDependencyFailed, dep, requeue, ids[i])
	}
	return true
}
