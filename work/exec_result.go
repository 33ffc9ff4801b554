//go:build linux

package work

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/rs/zerolog"
)

// An exec job's result and progress channels, named in its environment:
// BATON_RESULT_FILE is a path, in a directory of the holder's own (0700),
// that does not exist when the job starts; whatever the job writes there
// is its result once it exits 0. BATON_PROGRESS_FD is an open fd (3) on
// which the job writes lines "PCT MESSAGE". Neither is mixed with stdout
// or stderr, which stay the job's log.
const (
	envResultFile  = "BATON_RESULT_FILE"
	envProgressFD  = "BATON_PROGRESS_FD"
	progressFD     = 3
	maxProgressLen = 4 << 10 // longest progress line read; longer ones are skipped
)

// resultDir is the holder's directory for exec jobs' result files, made
// on the first job and named by the holder's pid; Close removes it. The
// directories of holders that are gone (kill -9: their Close never ran)
// are removed first.
func (x *Exec) resultDir() (string, error) {
	x.dirOnce.Do(func() {
		sweepResultDirs()
		x.dir, x.dirErr = os.MkdirTemp("", resultDirPrefix+strconv.Itoa(os.Getpid())+"-")
	})
	return x.dir, x.dirErr
}

const resultDirPrefix = "baton-results-"

// sweepResultDirs removes the result directories (resultDir) whose holder
// no longer runs: its pid is gone. A pid taken by another process since
// leaves its directory until that one ends; another user's stays (EPERM).
func sweepResultDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), resultDirPrefix+"*-*"))
	for _, d := range dirs {
		num, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), resultDirPrefix), "-")
		pid, err := strconv.Atoi(num)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			_ = os.RemoveAll(d)
		}
	}
}

// Close removes the directory of the jobs' result files. Call it once Run
// has returned.
func (x *Exec) Close() error {
	x.dirOnce.Do(func() {}) // none made from now on
	if x.dir == "" {
		return nil
	}
	return os.RemoveAll(x.dir)
}

// resultEnv is the job's BATON_RESULT_FILE and the path it names.
func (x *Exec) resultEnv(j *Job) (env, path string, err error) {
	dir, err := x.resultDir()
	if err != nil {
		return "", "", fmt.Errorf("make the directory of result files: %w", err)
	}
	// Named by level and entry: the high, normal and low streams issue
	// entry ids of their own, and the same id can run at once in two.
	path = filepath.Join(dir, j.Priority.String()+"-"+j.Entry)
	_ = os.Remove(path) // a leftover of a run of the same entry that ended hard
	return envResultFile + "=" + path, path, nil
}

// takeResult reads the result file a job that succeeded wrote (none: no
// result) and removes it. A result over the job's result_max fails the
// job; nothing of it is kept.
func takeResult(j *Job, path string, err error) error {
	defer os.Remove(path)
	if err != nil {
		return err
	}
	f, ferr := os.Open(path)
	if errors.Is(ferr, os.ErrNotExist) {
		return nil
	}
	if ferr != nil {
		return fmt.Errorf("read the job's result (%s): %w", envResultFile, ferr)
	}
	defer f.Close()
	most := j.resultMax
	if most <= 0 {
		most = DefaultResultMax
	}
	b, rerr := io.ReadAll(io.LimitReader(f, int64(most)+1))
	if rerr != nil {
		return fmt.Errorf("read the job's result (%s): %w", envResultFile, rerr)
	}
	if len(b) > most {
		size := len(b)
		if st, err := f.Stat(); err == nil {
			size = int(st.Size())
		}
		return resultTooLarge(size, most)
	}
	_ = j.SetResult(b)
	return nil
}

// progress gives the job fd 3, a pipe whose lines "PCT MESSAGE" become its
// progress (BATON_PROGRESS_FD), read until the job and what it left
// behind close it (p.wait). Reading never blocks the job for long: a note
// is stored in memory, and the holder writes the latest twice a second.
func (p *pipes) progress(cmd *exec.Cmd, j *Job, log zerolog.Logger) (env string, err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return "", fmt.Errorf("make the job's progress pipe: %w", err)
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, w)
	p.readers, p.child = append(p.readers, r), append(p.child, w)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		br := bufio.NewReaderSize(r, maxProgressLen)
		warned, long := false, false
		for {
			line, err := br.ReadSlice('\n')
			switch {
			case errors.Is(err, bufio.ErrBufferFull):
				long = true // skip to the end of this line
				continue
			case err != nil && len(line) == 0:
				return
			case long:
				long = false
				continue
			}
			pct, msg, perr := progressLine(bytes.TrimSuffix(line, []byte("\n")))
			if perr == nil {
				_ = j.SetProgress(pct, msg)
			} else if !warned {
				warned = true
				log.Warn().Err(perr).Msg("ignored a progress line (and say nothing of the next bad ones of this job)")
			}
			if err != nil {
				return
			}
		}
	}()
	return envProgressFD + "=" + strconv.Itoa(progressFD+len(cmd.ExtraFiles)-1), nil
}
