package console

import (
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
	Total, Peak   int64
}

// chartBar is one hour.
type chartBar struct {
	X, Y, W, H int
	// Label is the bar's tooltip: the hour and its count.
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
	}
	return v
}
