package console

import (
	"fmt"
	"strings"
	"time"

	"github.com/dlq/dlq/store"
)

// Chart geometry, in SVG user units (the stylesheet scales it).
const (
	chartBarWidth = 6
	chartGap      = 1
	chartHeight   = 32
)

// chartView is a queue's arrivals over 24 hours as bars, computed here so
// that the template only writes numbers into an <svg>: no markup is
// built from strings.
type chartView struct {
	Width, Height int
	Bars          []chartBar
	// Path draws every bar as one SVG path ("M x y h w v h h -w z" per
	// bar): a page with many queues stays small.
	Path        string
	Total, Peak int64
	// PeakLabel is the busiest hour and its count.
	PeakLabel string
}

// chartBar is one hour.
type chartBar struct {
	X, Y, W, H int
	// Label is the hour and its count.
	Label string
}

// arrivalsChart lays out one queue's hourly arrivals: bar heights scale
// to the peak hour, and an hour with any arrival is at least 1 unit tall
// so it never looks like zero.
func arrivalsChart(counts [store.ArrivalHours]int64, since time.Time) chartView {
	v := chartView{Width: store.ArrivalHours * (chartBarWidth + chartGap), Height: chartHeight}
	for _, n := range counts {
		v.Total += n
		v.Peak = max(v.Peak, n)
	}
	var path strings.Builder
	for i, n := range counts {
		h := 0
		if v.Peak > 0 && n > 0 {
			h = max(1, int(n*chartHeight/v.Peak))
		}
		hour := since.Add(time.Duration(i) * time.Hour).UTC()
		v.Bars = append(v.Bars, chartBar{
			X: i * (chartBarWidth + chartGap), Y: chartHeight - h, W: chartBarWidth, H: h,
			Label: hour.Format("Jan 2 15:00") + ": " + num(n),
		})
		if h > 0 {
			b := v.Bars[i]
			fmt.Fprintf(&path, "M%d %dh%dv%dh-%dz", b.X, b.Y, b.W, b.H, b.W)
		}
		if n == v.Peak && n > 0 && v.PeakLabel == "" {
			v.PeakLabel = v.Bars[i].Label
		}
	}
	v.Path = path.String()
	return v
}
