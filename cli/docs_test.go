package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
