package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// cronLine is one crontab line that runs 'baton run'.
type cronLine struct {
	Num    int      // 1-based line number
	Spec   string   // the five schedule fields, or an @descriptor
	Config string   // the --config value, "" when none
	Args   []string // baton run's other arguments before --, e.g. --slots 4 (they override the file)
	Bare   bool     // baton is named without a path, and no earlier line sets PATH
}

// cronPath is the PATH cron gives commands unless the crontab sets one.
const cronPath = "/usr/bin:/bin"

var envAssign = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*\s*=`)

// parseCrontab finds the lines of a crontab (user or /etc/cron.d format)
// that run 'baton run', in order. Comments, environment assignments and
// lines that run something else are skipped; @reboot lines are skipped too,
// since they start one candidate at boot and no more.
func parseCrontab(src []byte) []cronLine {
	var out []cronLine
	pathSet := false
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if envAssign.MatchString(line) {
			name, _, _ := strings.Cut(line, "=")
			pathSet = pathSet || strings.TrimSpace(name) == "PATH"
			continue
		}
		fields := strings.Fields(line)
		var spec string
		var rest []string
		switch {
		case strings.HasPrefix(fields[0], "@"):
			if fields[0] == "@reboot" {
				continue
			}
			spec, rest = fields[0], fields[1:]
		case len(fields) > 5:
			spec, rest = strings.Join(fields[:5], " "), fields[5:]
		default:
			continue
		}
		cmd := strings.Join(rest, " ")
		if i := strings.IndexByte(cmd, '%'); i >= 0 { // cron: the rest is stdin
			cmd = cmd[:i]
		}
		if l, ok := batonRun(shellWords(cmd)); ok {
			l.Num, l.Spec, l.Bare = n, spec, l.Bare && !pathSet
			out = append(out, l)
		}
	}
	return out
}

// batonRun finds "baton run" in a command's words and returns its --config
// value and its other arguments before the job command.
func batonRun(words []string) (l cronLine, ok bool) {
	i := 0
	for ; i+1 < len(words); i++ {
		if filepath.Base(words[i]) == "baton" && words[i+1] == "run" {
			break
		}
	}
	if i+1 >= len(words) {
		return l, false
	}
	l.Bare = !strings.Contains(words[i], "/")
	for j := i + 2; j < len(words); j++ {
		w := words[j]
		switch {
		case w == "--" || isShellOp(w):
			return l, true
		case w == "--config" || w == "-c":
			if j+1 < len(words) {
				l.Config = words[j+1]
				j++
			}
		case strings.HasPrefix(w, "--config="):
			l.Config = strings.TrimPrefix(w, "--config=")
		case strings.HasPrefix(w, "-c") && !strings.HasPrefix(w, "--"):
			l.Config = strings.TrimPrefix(w, "-c")
		default:
			l.Args = append(l.Args, w)
		}
	}
	return l, true
}

func isShellOp(w string) bool {
	switch w {
	case ";", "&&", "||", "|", "&", ">", ">>", "<", "2>", "2>&1", ">/dev/null":
		return true
	}
	return strings.HasPrefix(w, ">") || strings.HasPrefix(w, "2>")
}

// shellWords splits a command line on blanks, honouring single and double
// quotes and backslashes; enough for the lines cron runs, not a shell.
func shellWords(s string) []string {
	var (
		words []string
		cur   strings.Builder
		quote rune
		in    bool
	)
	flush := func() {
		if in {
			words = append(words, cur.String())
			cur.Reset()
			in = false
		}
	}
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote == '\'':
			cur.WriteRune(r)
		case r == '\\' && i+1 < len(rs):
			i++
			cur.WriteRune(rs[i])
			in = true
		case quote == 0 && (r == '\'' || r == '"'):
			quote, in = r, true
		case quote == 0 && (r == ' ' || r == '\t'):
			flush()
		case quote == 0 && r == ';':
			flush()
			words = append(words, ";")
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	flush()
	return words
}

// crontabLines reads the crontab at path ("-": src, standard input) and
// returns the lines that run 'baton run' with configPath (the --config given
// to check, "" for none).
func crontabLines(path string, stdin io.Reader, configPath string) ([]cronLine, error) {
	var src []byte
	var err error
	if path == "-" {
		src, err = io.ReadAll(stdin)
	} else {
		src, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("read crontab %s: %w", path, errUnwrapPath(err))
	}
	var lines []cronLine
	var other []string
	for _, l := range parseCrontab(src) {
		if !sameConfig(l.Config, configPath) {
			other = append(other, fmt.Sprintf("line %d (--config %q)", l.Num, l.Config))
			continue
		}
		lines = append(lines, l)
	}
	if len(lines) == 0 {
		want := "without --config"
		if configPath != "" {
			want = "with --config " + configPath
		}
		msg := fmt.Sprintf("crontab %s: no line runs 'baton run' %s", path, want)
		if len(other) > 0 {
			msg += "; 'baton run' is on " + strings.Join(other, ", ")
		}
		return nil, &usageError{msg: msg, hint: "pass the --config the crontab line uses"}
	}
	return lines, nil
}

// sameConfig reports whether a crontab line's --config names the same file
// as check's: the same path, or the same file on disk.
func sameConfig(line, ours string) bool {
	if line == "" || ours == "" {
		return line == ours
	}
	if filepath.Clean(line) == filepath.Clean(ours) {
		return true
	}
	a, errA := os.Stat(line)
	b, errB := os.Stat(ours)
	return errA == nil && errB == nil && os.SameFile(a, b)
}

func errUnwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
