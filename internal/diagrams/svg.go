package diagrams

import (
	"fmt"
	"html"
	"strings"
)

// svg builds one SVG document: shapes and text in a fixed-size canvas.
type svg struct {
	b    strings.Builder
	w, h int
}

func newSVG(w, h int, title string) *svg {
	s := &svg{w: w, h: h}
	fmt.Fprintf(&s.b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="Helvetica, Arial, sans-serif" font-size="13">`+"\n", w, h, w, h)
	fmt.Fprintf(&s.b, "<title>%s</title>\n", html.EscapeString(title))
	s.b.WriteString(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>` + "\n")
	fmt.Fprintf(&s.b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", w, h)
	return s
}

func (s *svg) rect(x, y, w, h float64, fill, stroke string) {
	fmt.Fprintf(&s.b, `<rect x="%g" y="%g" width="%g" height="%g" rx="3" fill="%s" stroke="%s"/>`+"\n", x, y, w, h, fill, stroke)
}

func (s *svg) line(x1, y1, x2, y2 float64, stroke string, dashed, arrow bool) {
	extra := ""
	if dashed {
		extra += ` stroke-dasharray="4 3"`
	}
	if arrow {
		extra += ` marker-end="url(#arrow)"`
	}
	fmt.Fprintf(&s.b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="1.5"%s/>`+"\n", x1, y1, x2, y2, stroke, extra)
}

func (s *svg) circle(x, y, r float64, fill string) {
	fmt.Fprintf(&s.b, `<circle cx="%g" cy="%g" r="%g" fill="%s"/>`+"\n", x, y, r, fill)
}

// text writes t at (x, y); anchor is start, middle or end.
func (s *svg) text(x, y float64, t, anchor string, size int, fill string) {
	fmt.Fprintf(&s.b, `<text x="%g" y="%g" text-anchor="%s" font-size="%d" fill="%s">%s</text>`+"\n", x, y, anchor, size, fill, html.EscapeString(t))
}

func (s *svg) bytes() []byte {
	return []byte(s.b.String() + "</svg>\n")
}

// The workers' colours, and the rest of the palette.
var (
	workerColor = []string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759"}
	ink         = "#222222"
	grey        = "#888888"
	light       = "#eeeeee"
)
