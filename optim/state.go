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
		e := nn.StateEntry{F32: buf[p.SegOffset : p.SegOffset+p.Len : p.SegOffset+p.Len]}
		if p.whole() {
			e.Name, e.Shape = Prefix+p.Param+"."+kind, p.Shape
		} else {
			e.Name = fmt.Sprintf("%s%s.%s[%d:%d]", Prefix, p.Param, kind, p.ParamOffset, p.ParamOffset+p.Len)
			e.Shape = []int{p.Len}
		}
		out = append(out, e)
	}
	return out
}

// piece is a saved flat range [lo,hi) of one parameter's state.
type piece struct {
	lo, hi int
	data   []float32
	key    string
}

// entryIndex finds state by "<param>.<kind>" (without the prefix): whole entries and slices.
type entryIndex struct {
	all    map[string]nn.StateEntry
	pieces map[string][]piece
}

func indexEntries(entries []nn.StateEntry) entryIndex {
	idx := entryIndex{all: map[string]nn.StateEntry{}, pieces: map[string][]piece{}}
	for _, e := range entries {
		idx.all[e.Name] = e
		if !strings.HasPrefix(e.Name, Prefix) {
			continue
		}
		name := strings.TrimPrefix(e.Name, Prefix)
		if base, lo, hi, ok := parseRange(name); ok {
			idx.pieces[base] = append(idx.pieces[base], piece{lo: lo, hi: hi, data: e.F32, key: e.Name})
		} else {
			idx.pieces[name] = append(idx.pieces[name], piece{lo: 0, hi: -1, data: e.F32, key: e.Name})
		}
	}
	return idx
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
	if !ok {
		return "", 0, 0, false
	}
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || lo < 0 || hi < lo {
		return "", 0, 0, false
	}
	return s[:open], lo, hi, true
}

func (b *base) loadScalars(idx entryIndex) error {
	e, ok := idx.all[KeyStep]
	if !ok || len(e.I64) != 1 {
		return fmt.Errorf("optim: state dict: %q missing or not one int64", KeyStep)
	}
	b.step = e.I64[0]
	if e, ok := idx.all[KeyLR]; ok {
		if len(e.F64) != 1 {
			return fmt.Errorf("optim: state dict: %q is not one float64", KeyLR)
		}
		b.lr = e.F64[0]
	}
	if e, ok := idx.all[KeyInitialLR]; ok {
		if len(e.F64) != 1 {
			return fmt.Errorf("optim: state dict: %q is not one float64", KeyInitialLR)
		}
		b.initialLR, b.hasInit = e.F64[0], true
	}
	return nil
}

// loadState fills segment si's buffer dst for kind from idx. It reports whether state was
// found; absent state is an error unless optional, and partial state always is.
func (b *base) loadState(idx entryIndex, si int, kind string, dst []float32, optional bool) (bool, error) {
	s := b.segs[si]
	parts := s.Parts
	if len(parts) == 0 {
		parts = []Part{{Param: s.Name, Shape: []int{len(s.Data)}, Len: len(s.Data)}}
	}
	nFound := 0
	for _, p := range parts {
		key := p.Param + "." + kind
		pcs := idx.pieces[key]
		if len(pcs) == 0 {
			continue
		}
		nFound++
		if err := fill(dst[p.SegOffset:p.SegOffset+p.Len], p, pcs); err != nil {
			return false, fmt.Errorf("optim: state dict: %s%s: %w", Prefix, key, err)
		}
	}
	switch {
	case nFound == len(parts):
		return true, nil
	case nFound == 0 && optional:
		return false, nil
	}
	for _, p := range parts {
		if len(idx.pieces[p.Param+"."+kind]) == 0 {
			return false, fmt.Errorf("optim: state dict: missing %s%s.%s (segment %q)", Prefix, p.Param, kind, s.Name)
		}
	}
	return false, nil
}

// fill copies the parameter range of p out of the saved pieces into dst.
func fill(dst []float32, p Part, pcs []piece) error {
	n := p.numel()
	lo, hi := p.ParamOffset, p.ParamOffset+p.Len
	sort.Slice(pcs, func(i, j int) bool { return pcs[i].lo < pcs[j].lo })
	covered := lo
	for _, pc := range pcs {
		plo, phi := pc.lo, pc.hi
		if phi < 0 { // whole-parameter entry
			phi = n
		}
		if pc.data == nil || len(pc.data) != phi-plo {
			return fmt.Errorf("%s: %d float32 values, want %d", pc.key, len(pc.data), phi-plo)
		}
		if phi > n {
			return fmt.Errorf("%s: range ends at %d beyond the parameter's %d elements", pc.key, phi, n)
		}
		a, z := max(plo, covered), min(phi, hi)
		if a >= z || plo > covered {
			continue
		}
		copy(dst[a-lo:z-lo], pc.data[a-plo:z-plo])
		covered = z
	}
	if covered < hi {
		return fmt.Errorf("saved state does not cover elements [%d:%d)", covered, hi)
	}
	return nil
}

// Consolidate merges sliced state entries ("optim.<param>.<kind>[lo:hi]", from the shards
// of a ZeRO checkpoint) into whole-parameter entries with the shapes given by shapes
// (parameter name to shape). Other entries pass through; the first of duplicate scalars
// wins. It fails, naming the key, when the slices do not cover a parameter.
func Consolidate(entries []nn.StateEntry, shapes map[string][]int) ([]nn.StateEntry, error) {
	idx := indexEntries(entries)
	var out []nn.StateEntry
	seen := map[string]bool{}
	for _, e := range entries {
		name := strings.TrimPrefix(e.Name, Prefix)
		base, _, _, sliced := parseRange(name)
		if !strings.HasPrefix(e.Name, Prefix) || !sliced {
			if !seen[e.Name] {
				seen[e.Name] = true
				out = append(out, e)
			}
			continue
		}
		if seen[base] {
			continue
		}
		seen[base] = true
		dot := strings.LastIndexByte(base, '.')
		param := base[:max(dot, 0)]
		shape, ok := shapes[param]
		if !ok {
			return nil, fmt.Errorf("optim: consolidate %s%s: no shape for parameter %q", Prefix, base, param)
		}
		p := Part{Param: param, Shape: shape}
		p.Len = p.numel()
		buf := make([]float32, p.Len)
		if err := fill(buf, p, idx.pieces[base]); err != nil {
			return nil, fmt.Errorf("optim: consolidate %s%s: %w", Prefix, base, err)
		}
		out = append(out, nn.StateEntry{Name: Prefix + base, Shape: shape, F32: buf})
	}
	return out, nil
}
