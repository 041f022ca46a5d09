// Package svgplot draws the harness's line charts as standalone SVG: one
// line per series over a shared x axis, log2 or linear, with axes, ticks, a
// grid and a legend. It knows only what the report needs.
package svgplot

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// Series is one line.
type Series struct {
	Name  string
	Color string // CSS colour; empty picks one from a palette
	X, Y  []float64
}

// Plot is one chart.
type Plot struct {
	Title, XLabel, YLabel string
	XLog2                 bool // x axis in powers of two (connection counts)
	Series                []Series
}

var palette = []string{"#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"}

const (
	width, height          = 720, 420
	left, right, top, bot  = 80, 190, 40, 55
	plotW, plotH           = width - left - right, height - top - bot
	fontFamily             = "Helvetica, Arial, sans-serif"
	legendRow              = 18
	tickLen                = 5
	yTicks                 = 5
	axisColor, gridColor   = "#333", "#ddd"
	markerRadius           = 3
	strokeWidth            = 2
	titleSize, labelSize   = 15, 12
	tickFontSize, legendFS = 11, 12
)

// Write renders p as an SVG document.
func (p *Plot) Write(w io.Writer) error {
	var b strings.Builder
	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymax := 0.0
	for _, s := range p.Series {
		for i := range s.X {
			xmin = math.Min(xmin, s.X[i])
			xmax = math.Max(xmax, s.X[i])
			if !math.IsNaN(s.Y[i]) {
				ymax = math.Max(ymax, s.Y[i])
			}
		}
	}
	if math.IsInf(xmin, 0) {
		xmin, xmax = 1, 2
	}
	if xmax == xmin {
		xmax = xmin + 1
	}
	ystep := niceStep(ymax / yTicks)
	ytop := ystep * math.Ceil(ymax/ystep)
	if ytop == 0 {
		ytop, ystep = 1, 0.2
	}
	fx := func(x float64) float64 {
		if p.XLog2 {
			return left + plotW*(math.Log2(x)-math.Log2(xmin))/(math.Log2(xmax)-math.Log2(xmin))
		}
		return left + plotW*(x-xmin)/(xmax-xmin)
	}
	fy := func(y float64) float64 { return top + plotH*(1-y/ytop) }

	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s">`+"\n", width, height, width, height, fontFamily)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="%d" font-weight="bold">%s</text>`+"\n", left, titleSize, esc(p.Title))
	// y grid and ticks
	for v := 0.0; v <= ytop*1.0001; v += ystep {
		y := fy(v)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", left, y, left+plotW, y, gridColor)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="%d" text-anchor="end">%s</text>`+"\n", left-tickLen-3, y+4, tickFontSize, human(v))
	}
	// x ticks at the data's x values
	seen := map[float64]bool{}
	for _, s := range p.Series {
		for _, x := range s.X {
			if seen[x] {
				continue
			}
			seen[x] = true
			px := fx(x)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", px, top, px, top+plotH, gridColor)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="%d" text-anchor="middle">%s</text>`+"\n", px, top+plotH+tickLen+13, tickFontSize, xLabel(x))
		}
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="%s"/>`+"\n", left, top, plotW, plotH, axisColor)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="%d" text-anchor="middle">%s</text>`+"\n", left+plotW/2, height-12, labelSize, esc(p.XLabel))
	fmt.Fprintf(&b, `<text x="18" y="%d" font-size="%d" text-anchor="middle" transform="rotate(-90 18 %d)">%s</text>`+"\n", top+plotH/2, labelSize, top+plotH/2, esc(p.YLabel))
	for i, s := range p.Series {
		col := s.Color
		if col == "" {
			col = palette[i%len(palette)]
		}
		var pts []string
		for j := range s.X {
			if math.IsNaN(s.Y[j]) {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", fx(s.X[j]), fy(s.Y[j])))
		}
		if len(pts) > 1 {
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%d" points="%s"/>`+"\n", col, strokeWidth, strings.Join(pts, " "))
		}
		for _, pt := range pts {
			xy := strings.Split(pt, ",")
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="%d" fill="%s"/>`+"\n", xy[0], xy[1], markerRadius, col)
		}
		ly := top + 10 + i*legendRow
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", left+plotW+15, ly, left+plotW+35, ly, col)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="%d">%s</text>`+"\n", left+plotW+40, ly+4, legendFS, esc(s.Name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// xLabel prints whole x values below 100000 as they are (1024, not 1.02k).
func xLabel(x float64) string {
	if x == math.Trunc(x) && math.Abs(x) < 1e5 {
		return fmt.Sprintf("%d", int64(x))
	}
	return human(x)
}

func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

// human prints 1500000 as 1.5M, 2500 as 2.5k.
func human(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e9:
		return trim(v/1e9) + "G"
	case a >= 1e6:
		return trim(v/1e6) + "M"
	case a >= 1e3:
		return trim(v/1e3) + "k"
	default:
		return trim(v)
	}
}

func trim(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

func esc(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")
	return r.Replace(s)
}
