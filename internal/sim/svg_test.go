package sim

import (
	"bytes"
	"encoding/xml"
	"strings"
	"testing"
	"time"
)

func TestWriteSVG(t *testing.T) {
	q := base()
	q.Slots, q.StandbySlots = 2, 3
	res := run(t, Config{Schedule: schedule(t, "* * * * *"), Q: q, Seed: 2, CrashRate: 2, HangRate: 0.5,
		Horizon: 3 * time.Hour, Trace: 40 * time.Minute})
	tl := res.Timeline
	if tl == nil || len(tl.Spans) == 0 || len(tl.Firings) < 39 || len(tl.Promotions) == 0 {
		t.Fatalf("timeline: %d spans, %d firings, %d promotions", len(tl.Spans), len(tl.Firings), len(tl.Promotions))
	}
	var b bytes.Buffer
	if err := tl.WriteSVG(&b, "2 run slots <&> 3 standby slots"); err != nil {
		t.Fatal(err)
	}
	// Well-formed XML, one row label per slot, the title escaped.
	d := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	for {
		_, err := d.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("not well-formed: %v", err)
			}
			break
		}
	}
	svg := b.String()
	for _, want := range []string{"<svg ", ">run 1<", ">standby 2<", "&lt;&amp;&gt;", "promotion", "</svg>"} {
		if !strings.Contains(svg, want) {
			t.Errorf("svg lacks %q", want)
		}
	}
}

func TestTraceWindow(t *testing.T) {
	res := run(t, Config{Schedule: schedule(t, "* * * * *"), Q: base(), Seed: 1, Horizon: 2 * time.Hour, Trace: 20 * time.Minute})
	tl := res.Timeline
	if tl.From != res.Warmup || tl.To != res.Warmup+20*time.Minute {
		t.Fatalf("window %v..%v, warm-up %v", tl.From, tl.To, res.Warmup)
	}
	for _, s := range tl.Spans {
		if s.To <= tl.From || s.From >= tl.To {
			t.Fatalf("span outside the window: %+v", s)
		}
	}
}
