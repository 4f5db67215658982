package console

import (
	"strconv"
	"strings"
)

// diffLine is one line of a line diff: Op is ' ' (in both), '-' (only in
// the original) or '+' (only in the new text); a run of unchanged lines
// far from any change is folded into one line saying how many.
type diffLine struct {
	Op   byte
	Text string
}

// diffContext is how many unchanged lines a diff shows around a change.
const diffContext = 3

// diffCellsMax bounds the table of the longest common subsequence: past
// it, the changed middle is shown as removed then added, whole.
const diffCellsMax = 4 << 20

// lineDiff compares two texts line by line: the lines they share at the
// start and the end, and between them the longest common subsequence
// (when small enough to compute), unchanged lines folded away from the
// changes.
func lineDiff(a, b string) []diffLine {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	pre := 0
	for pre < len(x) && pre < len(y) && x[pre] == y[pre] {
		pre++
	}
	suf := 0
	for suf < len(x)-pre && suf < len(y)-pre && x[len(x)-1-suf] == y[len(y)-1-suf] {
		suf++
	}
	var out []diffLine
	for _, l := range x[:pre] {
		out = append(out, diffLine{' ', l})
	}
	out = append(out, middleDiff(x[pre:len(x)-suf], y[pre:len(y)-suf])...)
	for _, l := range x[len(x)-suf:] {
		out = append(out, diffLine{' ', l})
	}
	return fold(out)
}

// middleDiff diffs the parts that differ, by their longest common
// subsequence.
func middleDiff(x, y []string) []diffLine {
	var out []diffLine
	if len(x)*len(y) > diffCellsMax {
		for _, l := range x {
			out = append(out, diffLine{'-', l})
		}
		for _, l := range y {
			out = append(out, diffLine{'+', l})
		}
		return out
	}
	// lcs[i][j]: the longest common subsequence of x[i:] and y[j:].
	lcs := make([][]int32, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	i, j := 0, 0
	for i < len(x) && j < len(y) {
		switch {
		case x[i] == y[j]:
			out = append(out, diffLine{' ', x[i]})
			i++
			j++
		case lcs[i+1][j] >= lcs[i][j+1]:
			out = append(out, diffLine{'-', x[i]})
			i++
		default:
			out = append(out, diffLine{'+', y[j]})
			j++
		}
	}
	for ; i < len(x); i++ {
		out = append(out, diffLine{'-', x[i]})
	}
	for ; j < len(y); j++ {
		out = append(out, diffLine{'+', y[j]})
	}
	return out
}

// fold keeps diffContext unchanged lines around each change and folds the
// rest of each unchanged run into one line.
func fold(lines []diffLine) []diffLine {
	near := make([]bool, len(lines))
	for i, l := range lines {
		if l.Op == ' ' {
			continue
		}
		for k := max(0, i-diffContext); k <= min(len(lines)-1, i+diffContext); k++ {
			near[k] = true
		}
	}
	var out []diffLine
	for i := 0; i < len(lines); {
		if near[i] || lines[i].Op != ' ' {
			out = append(out, lines[i])
			i++
			continue
		}
		j := i
		for j < len(lines) && !near[j] && lines[j].Op == ' ' {
			j++
		}
		n := j - i
		out = append(out, diffLine{'~', "… " + strconv.Itoa(n) + map[bool]string{true: " unchanged line", false: " unchanged lines"}[n == 1]})
		i = j
	}
	return out
}
