package ops

import (
	"fmt"
	"hash"
	"hash/fnv"
	"sync/atomic"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Float is the element type of the ops: float32 in training, float64 in gradient checks.
type Float interface{ ~float32 | ~float64 }

var opSeq atomic.Int64

// NextID returns a process-wide unique id. Ops whose instances must never be merged by
// gorgonia's node deduplication (ops with state such as a dropout mask or a gradient hook)
// put it in their hash.
func NextID() int64 { return opSeq.Add(1) }

// HashOf writes a description of an op into a 32-bit FNV hash; use it to implement
// Hashcode from WriteHash.
func HashOf(op interface{ WriteHash(hash.Hash) }) uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}

// Dense returns v as a *tensor.Dense of a float dtype, or an error naming the op.
func Dense(op string, v G.Value) (*tensor.Dense, error) {
	d, ok := v.(*tensor.Dense)
	if !ok {
		return nil, fmt.Errorf("%s: expected a dense tensor, got %T", op, v)
	}
	if dt := d.Dtype(); dt != tensor.Float32 && dt != tensor.Float64 {
		return nil, fmt.Errorf("%s: unsupported dtype %v (want float32 or float64)", op, dt)
	}
	return d, nil
}
