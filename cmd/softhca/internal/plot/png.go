package plot

import (
	"image"
	"image/color"
	"image/png"
	"io"
	"math"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// WritePNG writes the chart as a PNG image, the same chart as WriteSVG's
// drawn by a small rasteriser: lines stamped with a square pen (no
// anti-aliasing), markers as filled discs, text in basicfont's 7x13
// bitmap font (the title too; only the SVG has a bold title).
func (c *Chart) WritePNG(w io.Writer) error {
	if err := c.Validate(); err != nil {
		return err
	}
	return png.Encode(w, c.raster())
}

// raster draws the laid-out chart.
func (c *Chart) raster() *image.RGBA {
	sc := c.layout()
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	for i := range img.Pix {
		img.Pix[i] = 0xff
	}
	for _, l := range sc.grid {
		drawLine(img, l)
	}
	for _, l := range sc.axes {
		drawLine(img, l)
	}
	for _, t := range sc.texts {
		drawText(img, t, black)
	}
	for _, cv := range sc.curves {
		for i := 1; i < len(cv.line.pts); i++ {
			drawLine(img, line{cv.line.pts[i-1], cv.line.pts[i], cv.line.color, 2})
		}
		for _, m := range cv.markers {
			drawDisc(img, m.at, 3, m.color)
		}
	}
	for _, e := range sc.legend {
		drawLine(img, e.swatch)
		drawText(img, e.text, black)
	}
	return img
}

// drawLine stamps a square pen of the line's width along it, every half
// pixel.
func drawLine(img *image.RGBA, l line) {
	dx, dy := l.b.x-l.a.x, l.b.y-l.a.y
	n := int(math.Ceil(2*math.Max(math.Abs(dx), math.Abs(dy)))) + 1
	half := l.width / 2
	for i := 0; i <= n; i++ {
		f := float64(i) / float64(n)
		x, y := l.a.x+f*dx, l.a.y+f*dy
		fillRect(img, x-half, y-half, x+half, y+half, l.color)
	}
}

// fillRect fills the pixels whose centres lie in [x0, x1) x [y0, y1),
// at least the one pixel that holds the rectangle's centre.
func fillRect(img *image.RGBA, x0, y0, x1, y1 float64, c color.RGBA) {
	px0, px1 := int(math.Round(x0)), int(math.Round(x1))
	py0, py1 := int(math.Round(y0)), int(math.Round(y1))
	if px1 == px0 {
		px1++
	}
	if py1 == py0 {
		py1++
	}
	for y := py0; y < py1; y++ {
		for x := px0; x < px1; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

// drawDisc fills the pixels whose centres are within r of the pixel
// that holds at.
func drawDisc(img *image.RGBA, at pt, r int, c color.RGBA) {
	cx, cy := int(math.Floor(at.x)), int(math.Floor(at.y))
	for y := -r; y <= r; y++ {
		for x := -r; x <= r; x++ {
			if x*x+y*y <= r*r+1 {
				img.SetRGBA(cx+x, cy+y, c)
			}
		}
	}
}

// drawText draws t with its baseline at t.at.y, anchored as the SVG's
// text-anchor does.
func drawText(img *image.RGBA, t text, c color.RGBA) {
	face := basicfont.Face7x13
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: face}
	w := d.MeasureString(t.s).Round()
	x := t.at.x
	switch t.anchor {
	case middle:
		x -= float64(w) / 2
	case end:
		x -= float64(w)
	case start:
	}
	d.Dot = fixed.P(int(math.Round(x)), int(math.Round(t.at.y)))
	d.DrawString(t.s)
}
