package work

import "strconv"

// ExecError is a job whose command did not exit 0.
type ExecError struct {
	ExitCode int    // -1 when killed by a signal
	Signal   string // the signal that ended it, if any
	TimedOut bool   // Timeout passed
	Rejected bool   // ExitCode is one of RejectExitCodes: do not retry
	Stderr   string // the tail of its stderr
}

// Unwrap makes a rejected job's error match ErrSkipRetry.
func (e *ExecError) Unwrap() error {
	if e.Rejected {
		return ErrSkipRetry
	}
	return nil
}

func (e *ExecError) Error() string {
	var s string
	switch {
	case e.TimedOut:
		s = "timed out"
	case e.Signal != "":
		s = "killed by " + e.Signal
	case e.Rejected:
		s = "exit status " + strconv.Itoa(e.ExitCode) + " (rejected: not retried)"
	default:
		s = "exit status " + strconv.Itoa(e.ExitCode)
	}
	if e.Stderr != "" {
		s += ": " + e.Stderr
	}
	return s
}
