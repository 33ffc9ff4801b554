package metrics

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Every metric that docs/observability.md (its table and alert rules) and the
// Grafana dashboard name is one the collector exposes.
func TestDocsNameRealMetrics(t *testing.T) {
	known := map[string]bool{}
	ch := make(chan *prometheus.Desc, len(allDescs))
	(&Collector{}).Describe(ch)
	close(ch)
	name := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for d := range ch {
		n := name.FindStringSubmatch(d.String())[1]
		known[n] = true
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			known[n+s] = true
		}
	}
	used := regexp.MustCompile(`baton_[a-z_]+`)
	for _, f := range []string{"../docs/observability.md", "../docs/grafana/baton.json"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range used.FindAllString(string(b), -1) {
			m = strings.TrimSuffix(m, "_")
			if !known[m] && !strings.HasPrefix(m, "baton_metrics") {
				t.Errorf("%s names %s, which the collector does not expose", f, m)
			}
		}
	}
}
