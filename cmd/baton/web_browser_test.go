//go:build linux && browser

// The browser test runs with -tags browser: make test and make
// test-browser set it and install Debian's chromium when missing. A plain
// go test leaves it out (each Chromium start costs seconds) and keeps the
// HTTP-level test of the same pages (TestWebHTTP).

package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// screenshots is where TestWebBrowser also saves its screenshots (make
// screenshots: docs/img); they always go to a temp dir too.
var screenshots = flag.String("web.screenshots", "", "also save the dashboard's screenshots in this directory")

// chromium finds Debian's chromium; the test fails, naming the fix, when
// it is missing (scripts/install-test-deps.sh installs it).
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found in PATH: install it with 'apt-get install -y chromium' (scripts/install-test-deps.sh does)")
	return ""
}

// browse runs headless chromium on url with args (--dump-dom,
// --screenshot=...) and returns its stdout.
func browse(t *testing.T, bin, home, u string, args ...string) string {
	t.Helper()
	argv := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir=" + filepath.Join(home, "profile"), "--virtual-time-budget=3000"}, args...)
	cmd := exec.Command(bin, append(argv, u)...)
	cmd.Env = append(os.Environ(), "HOME="+home)
	cmd.Dir = home
	var errb strings.Builder
	cmd.Stderr = &errb
	done := make(chan struct{})
	timer := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill(); close(done) })
	out, err := cmd.Output()
	if !timer.Stop() {
		<-done
	}
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, errb.String())
	}
	return string(out)
}

// TestWebBrowser loads the dashboard in headless Chromium and checks what a
// person sees: the held slots with the holder's pid, the counts, the dead
// letter with its hostile payload shown as text (no script of it ran, ours
// did under the CSP), a job lookup and the dead letter's page; it saves
// screenshots (-web.screenshots=docs/img to keep them: make screenshots).
func TestWebBrowser(t *testing.T) {
	t.Parallel()
	bin := chromium(t)
	w := newWebRig(t, false)
	home := t.TempDir()
	dom := browse(t, bin, home, w.url+"/", "--dump-dom")
	pid := fmt.Sprint(w.holder.cmd.Process.Pid)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`<html lang="en" class="js">`), // app.js ran
		regexp.MustCompile(`id="count-done">20<`),
		regexp.MustCompile(`id="count-dead">1<`),
		regexp.MustCompile(`<td>run-\d</td>\s*<td>held</td><td>` + pid + `</td>`),
		regexp.MustCompile(`<td>standby-0</td>\s*<td>free</td>`),
		regexp.MustCompile(`<td class="payload"><code>&lt;script&gt;document\.body\.setAttribute\("data-pwned","script"\)&lt;/script&gt;&lt;img src=x onerror="document`),
		regexp.MustCompile(`20 jobs done, 1 failed runs`),
	} {
		if !want.MatchString(dom) {
			t.Errorf("the dashboard in chromium lacks %s", want)
		}
	}
	if strings.Contains(dom, "data-pwned=") || strings.Contains(dom, "<img src=\"x\"") {
		t.Errorf("the hostile payload ran or rendered as markup:\n%s", dom)
	}
	dom = browse(t, bin, home, w.url+"/job?queue=q&id="+w.deadID, "--dump-dom")
	if !strings.Contains(dom, `class="state state-dead">dead<`) {
		t.Errorf("job lookup in chromium:\n%s", dom)
	}
	deadURL := w.url + "/dead?queue=q&id=" + w.deadID
	dom = browse(t, bin, home, deadURL, "--dump-dom")
	if !strings.Contains(dom, `<pre id="payload">&lt;script&gt;document.body`) || strings.Contains(dom, "data-pwned=") {
		t.Errorf("dead letter page in chromium:\n%s", dom)
	}
	dirs := []string{home}
	if *screenshots != "" {
		dirs = append(dirs, *screenshots)
	}
	for _, dir := range dirs {
		for _, shot := range []struct{ name, url, size string }{
			{"web-dashboard.png", w.url + "/", "1280,1500"},
			{"web-dead-letter.png", deadURL, "1280,560"},
		} {
			name, u := shot.name, shot.url
			p, err := filepath.Abs(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			browse(t, bin, home, u, "--screenshot="+p, "--window-size="+shot.size, "--hide-scrollbars")
			if st, err := os.Stat(p); err != nil || st.Size() < 10000 {
				t.Errorf("screenshot %s: %v", p, err)
			}
		}
	}
}
