package optim

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gorgonia-parallel/gp/nn"
)

// State-dict key layout. Per-parameter state is "optim.<param>.<kind>" with the parameter's
// shape when a segment holds the whole parameter, and "optim.<param>.<kind>[lo:hi]" (flat
// elements lo..hi-1 of the parameter, shape [hi-lo]) when it holds a slice of it, as a ZeRO
// shard does. Loading accepts either form, and assembles a slice from whatever entries
// cover it, so state saved at one world size loads at another once the shards' entries are
// concatenated (or merged with Consolidate).
const (
	// Prefix starts every optimizer state key.
	Prefix = "optim."
	// KeyStep is the number of steps taken (int64 scalar).
	KeyStep = "optim.step"
	// KeyLR is the current learning rate (float64 scalar).
	KeyLR = "optim.lr"
	// KeyInitialLR is the learning rate when the first scheduler was attached (float64).
	KeyInitialLR = "optim.initial_lr"

	kindMomentum    = "momentum_buffer"
	kindExpAvg      = "exp_avg"
	kindExpAvgSq    = "exp_avg_sq"
	kindMaxExpAvgSq = "max_exp_avg_sq"
)

func (b *base) scalars() []nn.StateEntry {
	out := []nn.StateEntry{
		{Name: KeyStep, Shape: []int{}, I64: []int64{b.step}},
		{Name: KeyLR, Shape: []int{}, F64: []float64{b.lr}},
	}
	if b.hasInit {
		out = append(out, nn.StateEntry{Name: KeyInitialLR, Shape: []int{}, F64: []float64{b.initialLR}})
	}
	return out
}

// appendState appends segment si's state buf (aliased, not copied) under its parts' names.
func (b *base) appendState(out []nn.StateEntry, si int, kind string, buf []float32) []nn.StateEntry {
	s := b.segs[si]
	if len(s.Parts) == 0 {
		return append(out, nn.StateEntry{Name: Prefix + s.Name + "." + kind, Shape: []int{len(buf)}, F32: buf})
	}
	for _, p := range s.Parts {
		out = append(out, PartEntry(Prefix+p.Param+"."+kind, p, buf[p.SegOffset:p.SegOffset+p.Len:p.SegOffset+p.Len]))
	}
	return out
}

// PartEntry is the state-dict entry of buf, which holds the elements of part p: named name,
// with the parameter's shape, when p is the whole parameter, else name+"[lo:hi]" (the
// part's flat range of the parameter) with shape [p.Len]. buf is aliased, not copied.
func PartEntry(name string, p Part, buf []float32) nn.StateEntry {
	if p.whole() {
		return nn.StateEntry{Name: name, Shape: p.Shape, F32: buf}
	}
	return nn.StateEntry{Name: fmt.Sprintf("%s[%d:%d]", name, p.ParamOffset, p.ParamOffset+p.Len), Shape: []int{p.Len}, F32: buf}
}

// piece is a saved flat range [lo,hi) of one tensor; hi < 0: the whole tensor.
type piece struct {
	lo, hi int
	data   []float32
	key    string
}

// Slices finds float32 tensors in a state dict by name, from whole entries ("<name>") and
// slices of them ("<name>[lo:hi]", as PartEntry names them), so that a range of a tensor
// loads from whatever entries cover it: state saved at one world size loads at another.
type Slices struct {
	// Whole holds the entries without a range by name; of duplicates, the first.
	Whole  map[string]nn.StateEntry
	pieces map[string][]piece
}

// NewSlices indexes entries (aliased, not copied).
func NewSlices(entries []nn.StateEntry) *Slices {
	s := &Slices{Whole: map[string]nn.StateEntry{}, pieces: map[string][]piece{}}
	for _, e := range entries {
		if base, lo, hi, ok := parseRange(e.Name); ok {
			s.pieces[base] = append(s.pieces[base], piece{lo: lo, hi: hi, data: e.F32, key: e.Name})
		} else if _, dup := s.Whole[e.Name]; !dup {
			s.Whole[e.Name] = e
			s.pieces[e.Name] = append(s.pieces[e.Name], piece{lo: 0, hi: -1, data: e.F32, key: e.Name})
		}
	}
	for _, pcs := range s.pieces { // Fill walks each tensor's pieces by start
		sort.SliceStable(pcs, func(i, j int) bool { return pcs[i].lo < pcs[j].lo })
	}
	return s
}

// Has reports whether any entry holds elements of the tensor name.
func (s *Slices) Has(name string) bool { return len(s.pieces[name]) > 0 }

// Fill copies the elements of part p (the flat range [p.ParamOffset, p.ParamOffset+p.Len)
// of a tensor of shape p.Shape) of the tensor name into dst, out of the entries that cover
// them. It fails, naming the entry, on an entry whose length is not its range's or whose
// range ends beyond the tensor, and when the entries leave elements of the part uncovered.
func (s *Slices) Fill(name string, p Part, dst []float32) error {
	pcs := s.pieces[name]
	if len(pcs) == 0 {
		return fmt.Errorf("%s missing", name)
	}
	n := p.numel()
	lo, hi := p.ParamOffset, p.ParamOffset+p.Len
	covered := lo
	for _, pc := range pcs {
		plo, phi := pc.lo, pc.hi
		if phi < 0 { // whole-tensor entry
			phi = n
		}
		if pc.data == nil || len(pc.data) != phi-plo {
			return fmt.Errorf("%s: %d float32 values, want %d", pc.key, len(pc.data), phi-plo)
		}
		if phi > n {
			return fmt.Errorf("%s: range ends at %d beyond the tensor's %d elements", pc.key, phi, n)
		}
		a, z := max(plo, covered), min(phi, hi)
		if a >= z || plo > covered {
			continue
		}
		copy(dst[a-lo:z-lo], pc.data[a-plo:z-plo])
		covered = z
	}
	if covered < hi {
		return fmt.Errorf("%s: saved state does not cover elements [%d:%d)", name, covered, hi)
	}
	return nil
}

// parseRange splits "name[lo:hi]" into name, lo, hi.
func parseRange(s string) (string, int, int, bool) {
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

func (b *base) loadScalars(idx *Slices) error {
	e, ok := idx.Whole[KeyStep]
	if !ok || len(e.I64) != 1 {
		return fmt.Errorf("optim: state dict: %q missing or not one int64", KeyStep)
	}
	b.step = e.I64[0]
	if e, ok := idx.Whole[KeyLR]; ok {
		if len(e.F64) != 1 {
			return fmt.Errorf("optim: state dict: %q is not one float64", KeyLR)
		}
		b.lr = e.F64[0]
	}
	if e, ok := idx.Whole[KeyInitialLR]; ok {
		if len(e.F64) != 1 {
			return fmt.Errorf("optim: state dict: %q is not one float64", KeyInitialLR)
		}
		b.initialLR, b.hasInit = e.F64[0], true
	}
	return nil
}

// loadState fills segment si's buffer dst for kind from idx. It reports whether state was
// found; absent state is an error unless optional, and partial state always is.
func (b *base) loadState(idx *Slices, si int, kind string, dst []float32, optional bool) (bool, error) {
	s := b.segs[si]
	parts := s.Parts
	if len(parts) == 0 {
		parts = []Part{{Param: s.Name, Shape: []int{len(s.Data)}, Len: len(s.Data)}}
	}
	nFound := 0
	for _, p := range parts {
		key := Prefix + p.Param + "." + kind
		if !idx.Has(key) {
			continue
		}
		nFound++
		if err := idx.Fill(key, p, dst[p.SegOffset:p.SegOffset+p.Len]); err != nil {
			return false, fmt.Errorf("optim: state dict: %w", err)
		}
	}
	switch {
	case nFound == len(parts):
		return true, nil
	case nFound == 0 && optional:
		return false, nil
	}
	for _, p := range parts {
		if !idx.Has(Prefix + p.Param + "." + kind) {
			return false, fmt.Errorf("optim: state dict: missing %s%s.%s (segment %q)", Prefix, p.Param, kind, s.Name)
		}
	}
	return false, nil
}

// Consolidate merges sliced entries (from the shards of a ZeRO checkpoint: a parameter's
// "<param>[lo:hi]", its optimizer state's "optim.<param>.<kind>[lo:hi]") into whole entries
// with the shapes given by shapes (parameter name to shape). Other entries pass through;
// the first of duplicates wins. It fails, naming the key, when the slices do not cover a
// tensor.
func Consolidate(entries []nn.StateEntry, shapes map[string][]int) ([]nn.StateEntry, error) {
	idx := NewSlices(entries)
	var out []nn.StateEntry
	seen := map[string]bool{}
	for _, e := range entries {
		base, _, _, sliced := parseRange(e.Name)
		if !sliced {
			base = e.Name
		}
		if seen[base] {
			continue
		}
		seen[base] = true
		if !sliced {
			out = append(out, e)
			continue
		}
		param := base
		if rest, ok := strings.CutPrefix(base, Prefix); ok {
			param = rest[:max(strings.LastIndexByte(rest, '.'), 0)]
		}
		shape, ok := shapes[param]
		if !ok {
			return nil, fmt.Errorf("optim: consolidate %s: no shape for parameter %q", base, param)
		}
		p := Part{Param: param, Shape: shape}
		p.Len = p.numel()
		buf := make([]float32, p.Len)
		if err := idx.Fill(base, p, buf); err != nil {
			return nil, fmt.Errorf("optim: consolidate: %w", err)
		}
		out = append(out, nn.StateEntry{Name: base, Shape: shape, F32: buf})
	}
	return out, nil
}
