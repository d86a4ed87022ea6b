package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// describe lists a model's parameters and buffers, one line each: kind, name, shape, dtype.
func describe(ps *nn.ParamSet) []string {
	var out []string
	for _, p := range ps.Params {
		out = append(out, fmt.Sprintf("parameter %s %v float32", p.Name, p.Shape))
	}
	for _, b := range ps.Buffers {
		dt := "float32"
		if b.Int64 != nil {
			dt = "int64"
		}
		out = append(out, fmt.Sprintf("buffer %s %v %s", b.Name, b.Shape, dt))
	}
	return out
}

// ErrModelMismatch is wrapped by CheckModels's error when the ranks' models differ in
// parameter or buffer names, shapes, dtypes or order.
var ErrModelMismatch = errors.New("models differ across ranks")

// CheckModels checks that every rank of g has the same model: the same parameters and
// buffers, with the same names, shapes, dtypes and order. It exchanges a fingerprint of the
// model; when they differ, it gathers every rank's description and returns an error (wrapping
// ErrModelMismatch) naming each rank and entry that differs from rank 0. All ranks return the
// same error. It is a collective: every rank calls it.
func CheckModels(ctx context.Context, g comm.Group, ps *nn.ParamSet) error {
	return CheckDescribed(ctx, g, describe(ps))
}

// CheckDescribed is CheckModels over a description the caller made: one line per tensor,
// "kind name rest" (for example "learnable w1 [8 32] float32"), in the order every rank must
// agree on. The error names each rank and line that differs from rank 0's. It is a
// collective.
func CheckDescribed(ctx context.Context, g comm.Group, lines []string) error {
	text := strings.Join(lines, "\n")
	h := fnv.New64a()
	h.Write([]byte(text))
	n, r := g.Size(), g.Rank()
	fps := make([]int64, n)
	if err := g.AllGather(comm.I64(fps), comm.I64{int64(h.Sum64())}).Wait(ctx); err != nil {
		return fmt.Errorf("rank %d: exchanging model fingerprints: %w", r, err)
	}
	same := true
	for _, f := range fps {
		same = same && f == fps[0]
	}
	if same {
		return nil
	}
	lens := make([]int64, n)
	if err := g.AllGather(comm.I64(lens), comm.I64{int64(len(text))}).Wait(ctx); err != nil {
		return fmt.Errorf("rank %d: exchanging model descriptions: %w", r, err)
	}
	words := 0
	for _, l := range lens {
		words = max(words, int(l+7)/8)
	}
	mine := make([]int64, words)
	raw := make([]byte, 8*words)
	copy(raw, text)
	for i := range mine {
		mine[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
	}
	all := make([]int64, n*words)
	if err := g.AllGather(comm.I64(all), comm.I64(mine)).Wait(ctx); err != nil {
		return fmt.Errorf("rank %d: exchanging model descriptions: %w", r, err)
	}
	descs := make([][]string, n)
	for k := range n {
		b := make([]byte, 8*words)
		for i := range words {
			binary.LittleEndian.PutUint64(b[8*i:], uint64(all[k*words+i]))
		}
		descs[k] = strings.Split(string(b[:lens[k]]), "\n")
	}
	var errs []error
	for k := 1; k < n; k++ {
		errs = append(errs, diffModels(k, descs[0], descs[k])...)
	}
	if len(errs) == 0 {
		errs = append(errs, errors.New("fingerprints differ but descriptions agree"))
	}
	return fmt.Errorf("%w (seen from rank %d): %w", ErrModelMismatch, r, errors.Join(errs...))
}

// diffModels names the entries in which rank k's description differs from rank 0's.
func diffModels(k int, ref, got []string) []error {
	key := func(l string) (string, string) {
		f := strings.SplitN(l, " ", 3)
		if len(f) < 3 {
			return l, ""
		}
		return f[0] + " " + f[1], f[2]
	}
	refBy, gotBy := map[string]string{}, map[string]string{}
	for _, l := range ref {
		k, v := key(l)
		refBy[k] = v
	}
	for _, l := range got {
		k, v := key(l)
		gotBy[k] = v
	}
	var errs []error
	for _, l := range ref {
		name, want := key(l)
		have, ok := gotBy[name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("rank %d lacks %s (rank 0: %s)", k, name, want))
		case have != want:
			errs = append(errs, fmt.Errorf("rank %d: %s is %s, rank 0: %s", k, name, have, want))
		}
	}
	for _, l := range got {
		name, have := key(l)
		if _, ok := refBy[name]; !ok {
			errs = append(errs, fmt.Errorf("rank %d has %s (%s) that rank 0 lacks", k, name, have))
		}
	}
	if len(errs) == 0 {
		for i := range min(len(ref), len(got)) {
			if ref[i] != got[i] {
				a, _ := key(ref[i])
				b, _ := key(got[i])
				errs = append(errs, fmt.Errorf("rank %d registers %s at position %d where rank 0 registers %s", k, b, i, a))
				break
			}
		}
	}
	return errs
}
