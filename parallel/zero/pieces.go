package zero

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
)

// partEntry names buf, the slice of parameter p.Param described by p, as
// prefix+param+suffix (whole parameter, with its shape) or prefix+param+suffix+"[lo:hi]".
func partEntry(prefix, suffix string, p optim.Part, buf []float32) nn.StateEntry {
	name := prefix + p.Param + suffix
	if p.ParamOffset == 0 && p.Len == numelOf(p.Shape) {
		return nn.StateEntry{Name: name, Shape: p.Shape, F32: buf}
	}
	return nn.StateEntry{Name: fmt.Sprintf("%s[%d:%d]", name, p.ParamOffset, p.ParamOffset+p.Len), Shape: []int{p.Len}, F32: buf}
}

func numelOf(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

type piece struct {
	lo, hi int // hi < 0: the whole tensor
	data   []float32
	key    string
}

// pieceIndex finds float32 state by key, from whole entries and "[lo:hi]" slices.
type pieceIndex struct {
	whole  map[string]nn.StateEntry
	pieces map[string][]piece
}

func newPieceIndex(entries []nn.StateEntry) *pieceIndex {
	idx := &pieceIndex{whole: map[string]nn.StateEntry{}, pieces: map[string][]piece{}}
	for _, e := range entries {
		if base, lo, hi, ok := splitRange(e.Name); ok {
			idx.pieces[base] = append(idx.pieces[base], piece{lo, hi, e.F32, e.Name})
			continue
		}
		if _, dup := idx.whole[e.Name]; !dup {
			idx.whole[e.Name] = e
			idx.pieces[e.Name] = append(idx.pieces[e.Name], piece{0, -1, e.F32, e.Name})
		}
	}
	return idx
}

// splitRange splits "name[lo:hi]" into its parts.
func splitRange(s string) (string, int, int, bool) {
	if !strings.HasSuffix(s, "]") {
		return "", 0, 0, false
	}
	open := strings.LastIndexByte(s, '[')
	if open < 0 {
		return "", 0, 0, false
	}
	a, b, ok := strings.Cut(s[open+1:len(s)-1], ":")
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || lo < 0 || hi < lo {
		return "", 0, 0, false
	}
	return s[:open], lo, hi, true
}

// fill copies elements [off, off+len(dst)) of the tensor key (numel elements in all) out
// of whatever pieces cover them.
func (idx *pieceIndex) fill(key string, dst []float32, off, numel int) error {
	pcs := idx.pieces[key]
	if len(pcs) == 0 {
		return fmt.Errorf("zero: state %q missing", key)
	}
	sort.Slice(pcs, func(i, j int) bool { return pcs[i].lo < pcs[j].lo })
	lo, hi := off, off+len(dst)
	covered := lo
	for _, pc := range pcs {
		plo, phi := pc.lo, pc.hi
		if phi < 0 {
			phi = numel
		}
		if pc.data == nil || len(pc.data) != phi-plo || phi > numel {
			return fmt.Errorf("zero: state %s: %d float32 values for range [%d:%d) of %d", pc.key, len(pc.data), plo, phi, numel)
		}
		a, z := max(plo, covered), min(phi, hi)
		if a >= z || plo > covered {
			continue
		}
		copy(dst[a-lo:z-lo], pc.data[a-plo:z-plo])
		covered = z
	}
	if covered < hi {
		return fmt.Errorf("zero: state %q: saved pieces do not cover elements [%d:%d)", key, covered, hi)
	}
	return nil
}
