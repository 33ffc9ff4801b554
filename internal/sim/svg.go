package sim

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"strings"
	"time"

	"github.com/baton-run/baton/standby"
)

// SVG layout, in pixels.
const (
	svgWidth  = 1000 // time axis
	svgLeft   = 90   // slot labels
	svgRight  = 20
	svgHead   = 46 // axis labels and firing marks, below the title
	svgLine   = 18 // one title line
	svgRow    = 24
	svgGapRow = 14 // between run and standby rows
)

// WriteSVG draws the timeline: one row per run slot, then one per standby
// slot, each process a bar in its own colour (so a promotion shows the same
// colour moving from a standby row to a run row), cron firings on the axis,
// empty run slots and stretches with fewer than k holders in red. Each line
// of title is a line of heading.
func (tl *Timeline) WriteSVG(w io.Writer, title string) error {
	bw := bufio.NewWriter(w)
	titles := strings.Split(title, "\n")
	svgTop := svgHead + svgLine*len(titles)
	rows := tl.Slots + tl.StandbySlots
	height := svgTop + rows*svgRow + svgGapRow + 96
	width := svgLeft + svgWidth + svgRight
	span := float64(tl.To - tl.From)
	x := func(t time.Duration) float64 {
		t = min(max(t, tl.From), tl.To)
		return svgLeft + float64(t-tl.From)/span*svgWidth
	}
	y := func(role standby.Role, slot int) int {
		if role == standby.Run {
			return svgTop + slot*svgRow
		}
		return svgTop + (tl.Slots+slot)*svgRow + svgGapRow
	}
	runBottom := y(standby.Run, tl.Slots-1) + svgRow
	bottom := svgTop + rows*svgRow + svgGapRow

	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(bw, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	for i, t := range titles {
		weight := "bold"
		if i > 0 {
			weight = "normal"
		}
		fmt.Fprintf(bw, `<text x="%d" y="%d" font-size="14" font-weight="%s">%s</text>`+"\n", svgLeft, 18+i*svgLine, weight, html.EscapeString(t))
	}

	// Axis: ticks with wall-clock labels, and the cron firings.
	step := tickStep(tl.To - tl.From)
	first := (tl.From + step - 1) / step * step
	for t := first; t <= tl.To; t += step {
		fmt.Fprintf(bw, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x(t), svgTop-6, x(t), bottom)
		fmt.Fprintf(bw, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", x(t), svgTop-26, tl.Start.Add(t).Format("15:04"))
	}
	for _, f := range tl.Firings {
		fmt.Fprintf(bw, `<path d="M%.1f %d l-4 -8 h8 z" fill="#333"/>`+"\n", x(f), svgTop-4)
	}
	fmt.Fprintf(bw, `<text x="%d" y="%d" text-anchor="end" fill="#333">cron</text>`+"\n", svgLeft-8, svgTop-6)

	// Rows.
	for i := 0; i < tl.Slots; i++ {
		row(bw, y(standby.Run, i), fmt.Sprintf("run %d", i), "#f4f4f4")
	}
	for i := 0; i < tl.StandbySlots; i++ {
		row(bw, y(standby.Standby, i), fmt.Sprintf("standby %d", i), "#fafafa")
	}

	// Stretches with fewer than k holders, and empty run slots.
	for _, g := range tl.Gaps {
		fmt.Fprintf(bw, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#e53935" opacity="0.25"/>`+"\n",
			x(g.From), svgTop, max(x(g.To)-x(g.From), 1), runBottom-svgTop)
	}
	for _, v := range tl.Vacancies {
		fmt.Fprintf(bw, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#e53935"/>`+"\n",
			x(v.From), y(standby.Run, v.Slot)+svgRow/2-2, max(x(v.To)-x(v.From), 1), 4)
	}

	// Processes.
	for _, s := range tl.Spans {
		top := y(s.Role, s.Slot) + 3
		x0, x1 := x(s.From), x(s.To)
		fill, stroke := colour(s.Proc)
		if s.Role == standby.Standby {
			fmt.Fprintf(bw, `<rect x="%.1f" y="%d" width="%.1f" height="%d" rx="3" fill="%s" fill-opacity="0.35" stroke="%s" stroke-dasharray="4 2"/>`+"\n",
				x0, top, max(x1-x0, 1), svgRow-6, fill, stroke)
		} else {
			fmt.Fprintf(bw, `<rect x="%.1f" y="%d" width="%.1f" height="%d" rx="3" fill="%s" stroke="%s"/>`+"\n",
				x0, top, max(x1-x0, 1), svgRow-6, fill, stroke)
		}
		if s.HungAt > 0 {
			fmt.Fprintf(bw, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#555" opacity="0.55"/>`+"\n",
				x(s.HungAt), top, max(x1-x(s.HungAt), 1), svgRow-6)
		}
		if x1-x0 > 34 {
			fmt.Fprintf(bw, `<text x="%.1f" y="%d" fill="#222" font-size="10">#%d</text>`+"\n", x0+4, top+13, s.Proc)
		}
		switch {
		case s.To > tl.To:
			// ends after the window: no end marker
		case s.End == EndCrash:
			fmt.Fprintf(bw, `<path d="M%.1f %d l8 8 m0 -8 l-8 8" stroke="#c62828" stroke-width="2.5"/>`+"\n", x1-4, top+5)
		case s.End == EndTimeout:
			fmt.Fprintf(bw, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#777" stroke-width="3"/>`+"\n", x1, top-2, x1, top+svgRow-4)
		}
	}
	for _, p := range tl.Promotions {
		x0 := x(p.T)
		y0, y1 := y(standby.Standby, p.Standby)+svgRow/2, y(standby.Run, p.Run)+svgRow-3
		fmt.Fprintf(bw, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#1a237e" stroke-width="1.5"/>`+"\n", x0, y0, x0, y1+6)
		fmt.Fprintf(bw, `<path d="M%.1f %d l-4 7 h8 z" fill="#1a237e"/>`+"\n", x0, y1)
	}

	legend(bw, bottom+26)
	fmt.Fprintln(bw, `</svg>`)
	return bw.Flush()
}

func row(w io.Writer, top int, label, fill string) {
	fmt.Fprintf(w, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", svgLeft, top, svgWidth, svgRow, fill)
	fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", svgLeft-8, top+16, label)
}

func legend(w io.Writer, top int) {
	x := svgLeft
	item := func(shape, label string, width int) {
		fmt.Fprintf(w, shape+"\n", x, top)
		fmt.Fprintf(w, `<text x="%d" y="%d">%s</text>`+"\n", x+26, top+11, label)
		x += width
	}
	item(`<rect x="%d" y="%d" width="20" height="14" rx="3" fill="#9ccc65" stroke="#558b2f"/>`, "holder (colour = process)", 200)
	item(`<rect x="%d" y="%d" width="20" height="14" rx="3" fill="#9ccc65" fill-opacity="0.35" stroke="#558b2f" stroke-dasharray="4 2"/>`, "standby", 100)
	item(`<path d="M%d %d m10 0 v9 m-4 0 h8 l-4 6 z" stroke="#1a237e" fill="#1a237e"/>`, "promotion", 110)
	item(`<path d="M%d %d m10 14 l-4 -8 h8 z" fill="#333"/>`, "cron firing", 120)
	item(`<rect x="%d" y="%d" width="20" height="14" fill="#e53935" opacity="0.3"/>`, "fewer than k holders", 170)
	top += 24
	x = svgLeft
	item(`<rect x="%d" y="%d" width="20" height="4" transform="translate(0 5)" fill="#e53935"/>`, "empty run slot", 150)
	item(`<path d="M%d %d m6 3 l8 8 m0 -8 l-8 8" stroke="#c62828" stroke-width="2.5"/>`, "crash", 100)
	item(`<rect x="%d" y="%d" width="20" height="14" fill="#555" opacity="0.55"/>`, "hung until its hard deadline", 230)
	item(`<path d="M%d %d m10 0 v14" stroke="#777" stroke-width="3"/>`, "standby timed out", 150)
}

// colour gives process n a fill and a darker stroke, far from its neighbours.
func colour(n int) (fill, stroke string) {
	h := (n * 137) % 360
	return fmt.Sprintf("hsl(%d,60%%,72%%)", h), fmt.Sprintf("hsl(%d,45%%,38%%)", h)
}

// tickStep picks an axis step giving about 6 to 15 ticks.
func tickStep(d time.Duration) time.Duration {
	for _, s := range []time.Duration{
		10 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute,
		15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
	} {
		if d/s <= 15 {
			return s
		}
	}
	return 7 * 24 * time.Hour
}
