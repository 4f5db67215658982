package category

// automaton finds, in one pass over a text, which of many lower-case
// word lists occur in it (an Aho-Corasick automaton, its failure links
// folded into a full transition table). The defaults are some 150 words;
// looking for each with strings.Contains cost ingest several microseconds
// per message, one pass costs a fraction of one.
type automaton struct {
	// class maps a byte to its column: the bytes the words use, and 0
	// for every other.
	class   [256]uint8
	classes int
	// next is the transition table, state × class.
	next []int32
	// out holds, per state, the lists (bits) a word ending there belongs
	// to, failure links included.
	out   [][]uint64
	words int // number of word lists
}

// newAutomaton builds the automaton of lists: list i is found when any
// of lists[i] occurs. The words are lower-case ASCII.
func newAutomaton(lists [][]string) *automaton {
	a := &automaton{words: len(lists)}
	for _, l := range lists {
		for _, w := range l {
			for i := 0; i < len(w); i++ {
				if a.class[w[i]] == 0 {
					a.classes++
					a.class[w[i]] = uint8(a.classes)
				}
			}
		}
	}
	// Upper-case letters read as their lower case.
	for c := 'A'; c <= 'Z'; c++ {
		a.class[c] = a.class[c+'a'-'A']
	}
	width := a.classes + 1
	nwords := (len(lists) + 63) / 64
	// The trie.
	a.next = make([]int32, width)
	a.out = [][]uint64{make([]uint64, nwords)}
	newState := func() int32 {
		a.next = append(a.next, make([]int32, width)...)
		a.out = append(a.out, make([]uint64, nwords))
		return int32(len(a.out) - 1)
	}
	for li, l := range lists {
		for _, w := range l {
			s := int32(0)
			for i := 0; i < len(w); i++ {
				c := int32(a.class[w[i]])
				if a.next[s*int32(width)+c] == 0 {
					a.next[s*int32(width)+c] = newState()
				}
				s = a.next[s*int32(width)+c]
			}
			a.out[s][li/64] |= 1 << (li % 64)
		}
	}
	// Failure links, breadth first, folded into the table.
	fail := make([]int32, len(a.out))
	var queue []int32
	for c := 0; c < width; c++ {
		if s := a.next[c]; s != 0 {
			queue = append(queue, s)
		}
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for i := range a.out[s] {
			a.out[s][i] |= a.out[fail[s]][i]
		}
		for c := 0; c < width; c++ {
			t := a.next[int(s)*width+c]
			if t == 0 {
				a.next[int(s)*width+c] = a.next[int(fail[s])*width+c]
				continue
			}
			fail[t] = a.next[int(fail[s])*width+c]
			queue = append(queue, t)
		}
	}
	return a
}

// find returns the lists that occur in s (ASCII, any case).
func (a *automaton) find(s string) []uint64 {
	found := make([]uint64, (a.words+63)/64)
	width := int32(a.classes + 1)
	st := int32(0)
	for i := 0; i < len(s); i++ {
		st = a.next[st*width+int32(a.class[s[i]])]
		if o := a.out[st]; o[0] != 0 || len(o) > 1 {
			for j := range o {
				found[j] |= o[j]
			}
		}
	}
	return found
}
