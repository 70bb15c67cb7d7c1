package deadletter

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
)

// The overview's charts, drawn on the server as inline SVG: a few dozen
// points each, so no charting library and no script (the page's CSP
// allows none but htmx). Each carries data-* attributes with its figures,
// for people's tools and for the browser tests.

// series is one line of a chart.
type series struct {
	Name, Color string
	Values      []float64
}

const (
	chartW, chartH     = 560, 150
	chartL, chartR     = 46, 8 // room for the y labels
	chartT, chartB     = 10, 22
	chartPlotW         = chartW - chartL - chartR
	chartPlotH         = chartH - chartT - chartB
	barH, barGap, barL = 18, 6, 130
)

// niceMax rounds m up to 1, 2 or 5 times a power of ten.
func niceMax(m float64) float64 {
	if m <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(m)))
	for _, f := range []float64{1, 2, 5, 10} {
		if m <= f*p {
			return f * p
		}
	}
	return 10 * p
}

func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 100 || v == math.Trunc(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// lineChart draws the series over the same x axis (one value a minute,
// the last one now), with unit after the y labels.
func lineChart(id, title, unit string, xs []string, ss ...series) template.HTML {
	top := 0.0
	n := 0
	for _, s := range ss {
		n = max(n, len(s.Values))
		for _, v := range s.Values {
			top = max(top, v)
		}
	}
	top = niceMax(top)
	x := func(i int) float64 {
		if n <= 1 {
			return chartL
		}
		return chartL + float64(i)*chartPlotW/float64(n-1)
	}
	y := func(v float64) float64 { return chartT + chartPlotH - v/top*chartPlotH }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" id="chart-%s" data-chart="%s" data-max="%s" viewBox="0 0 %d %d" role="img" aria-label="%s">`,
		id, id, num(top), chartW, chartH, template.HTMLEscapeString(title))
	fmt.Fprintf(&b, `<title>%s</title>`, template.HTMLEscapeString(title))
	for _, f := range []float64{0, 0.5, 1} {
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, chartL, chartW-chartR, y(f*top), y(f*top))
		fmt.Fprintf(&b, `<text class="axis" x="%d" y="%.1f" text-anchor="end">%s%s</text>`, chartL-4, y(f*top)+4, num(f*top), template.HTMLEscapeString(unit))
	}
	for i, l := range xs {
		if l == "" {
			continue
		}
		anchor := "middle"
		switch i {
		case 0:
			anchor = "start"
		case len(xs) - 1:
			anchor = "end"
		}
		fmt.Fprintf(&b, `<text class="axis" x="%.1f" y="%d" text-anchor="%s">%s</text>`, x(i), chartH-6, anchor, template.HTMLEscapeString(l))
	}
	for _, s := range ss {
		var pts []string
		for i, v := range s.Values {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(v)))
		}
		last := 0.0
		if len(s.Values) > 0 {
			last = s.Values[len(s.Values)-1]
		}
		total := 0.0
		for _, v := range s.Values {
			total += v
		}
		fmt.Fprintf(&b, `<polyline class="line" data-series="%s" data-last="%s" data-total="%s" fill="none" stroke="%s" stroke-width="2" points="%s"><title>%s</title></polyline>`,
			template.HTMLEscapeString(s.Name), num(last), num(total), s.Color, strings.Join(pts, " "), template.HTMLEscapeString(s.Name))
	}
	// The legend, at the top right.
	lx := chartW - chartR
	for i := len(ss) - 1; i >= 0; i-- {
		s := ss[i]
		w := 14 + 7*len(s.Name)
		lx -= w
		fmt.Fprintf(&b, `<rect x="%d" y="2" width="10" height="4" fill="%s"/><text class="legend" x="%d" y="9">%s</text>`, lx, s.Color, lx+13, template.HTMLEscapeString(s.Name))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // every text in it is escaped above
}

// bar is one row of a bar chart.
type bar struct {
	Label, Class string
	Value        int
}

// barChart draws one horizontal bar per row, its count at its end.
func barChart(id, title string, bars []bar) template.HTML {
	top := 0
	for _, r := range bars {
		top = max(top, r.Value)
	}
	h := max(len(bars), 1)*(barH+barGap) + barGap
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" id="chart-%s" data-chart="%s" viewBox="0 0 %d %d" role="img" aria-label="%s"><title>%s</title>`,
		id, id, chartW, h, template.HTMLEscapeString(title), template.HTMLEscapeString(title))
	for i, r := range bars {
		y := barGap + i*(barH+barGap)
		w := 0.0
		if top > 0 {
			w = float64(r.Value) / float64(top) * float64(chartW-barL-60)
		}
		fmt.Fprintf(&b, `<g data-state="%s" data-count="%d"><text class="axis" x="%d" y="%d" text-anchor="end">%s</text>`+
			`<rect class="sbar %s" x="%d" y="%d" width="%.1f" height="%d" rx="3"/><text class="value" x="%.1f" y="%d">%d</text></g>`,
			template.HTMLEscapeString(r.Label), r.Value, barL-6, y+13, template.HTMLEscapeString(r.Label),
			template.HTMLEscapeString(r.Class), barL, y, max(w, 1), barH, float64(barL)+max(w, 1)+5, y+13, r.Value)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // every text in it is escaped above
}
