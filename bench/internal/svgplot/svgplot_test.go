package svgplot

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"strings"
	"testing"
)

func TestWriteWellFormed(t *testing.T) {
	p := Plot{Title: "a <b> & c", XLabel: "connections", YLabel: "req/s", XLog2: true, Series: []Series{
		{Name: "one", X: []float64{1, 16, 1024}, Y: []float64{10, 2000, 150000}},
		{Name: "two", Color: "#000", X: []float64{1, 16, 1024}, Y: []float64{5, math.NaN(), 90000}},
	}}
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(&b)
	for {
		if _, err := d.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("not well-formed: %v", err)
		}
	}
	b.Reset() // the decoder consumed the buffer: render again to inspect
	_ = p.Write(&b)
	s := b.String()
	if strings.Count(s, "<polyline") != 2 || !strings.Contains(s, "a &lt;b&gt; &amp; c") || !strings.Contains(s, ">150k<") {
		t.Fatalf("unexpected SVG:\n%s", s)
	}
}

func TestHuman(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 1024: "1.02k", 2500000: "2.5M", 64: "64"} {
		if got := human(v); got != want {
			t.Errorf("human(%v) = %q, want %q", v, got, want)
		}
	}
}
