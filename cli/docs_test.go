package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/baton-run/baton/internal/config"
	"github.com/spf13/pflag"
)

// mdLink is a Markdown link target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocsStandAlone: every relative link in the README and docs/ names a
// file of the repository, so the docs never send a reader outside it.
func TestDocsStandAlone(t *testing.T) {
	pages, _ := filepath.Glob("../docs/*.md")
	pages = append(pages, "../README.md")
	links := 0
	for _, page := range pages {
		src, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(src), -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			p := filepath.Join(filepath.Dir(page), target)
			rel, err := filepath.Rel("..", p)
			if err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("%s: link %s leaves the repository", page, m[1])
				continue
			}
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s: link %s: %v", page, m[1], err)
			}
		}
		if strings.Contains(string(src), "shared/DESIGN.md") {
			t.Errorf("%s: points to shared/DESIGN.md, outside the repository", page)
		}
	}
	if links < 10 {
		t.Fatalf("%d relative links found: the pattern is broken", links)
	}
}

// TestReadmeListsEveryKey: every config key (every flag of run that is a
// key) has a row in the README's configuration table, and every row names a
// key that exists.
func TestReadmeListsEveryKey(t *testing.T) {
	src, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(string(src), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.Split(line, "|")[1]
		for _, m := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(first, -1) {
			rows[m[1]] = true
		}
	}
	fs, _ := runFlags()
	keys := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) {
		if _, ok := f.Annotations[config.GroupAnnotation]; !ok {
			return
		}
		key := strings.ReplaceAll(f.Name, "-", "_")
		keys[key] = true
		if !rows[key] {
			t.Errorf("README: no configuration row for %s", key)
		}
	})
	for r := range rows {
		if !keys[r] {
			t.Errorf("README: a configuration row names %s, which is not a config key", r)
		}
	}
}
