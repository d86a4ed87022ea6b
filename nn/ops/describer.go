package ops

import G "gorgonia.org/gorgonia"

// Describer is an op defined outside this package that states what it computes in this
// package's vocabulary (Desc), so that another executor of the graph (cuda/tape) runs it
// without importing, or even knowing, the package that defines it: Describe returns the op
// through ops.Describe like this package's own. Describe must return the same description
// for the op's life, and the op must compute, on the CPU, what its Kind says.
type Describer interface {
	G.Op
	Describe() Desc
}

// WindowAttention is the static shape of windowed multi-head self-attention with a
// relative-position bias (the Swin Transformer's, models/swin): Bw windows of N tokens, C
// channels in Heads heads (C/Heads each); the bias table has TableRows rows of Heads values
// and RelIndex (N·N entries, row-major over the token pairs) names the table row of each
// pair; Mask is nil or NW windows of N·N additive values, window b using window b mod NW.
// The scores are scaled by 1/sqrt(C/Heads) before the bias and the mask.
type WindowAttention struct {
	Bw, N, C, Heads, TableRows, NW int
	RelIndex                       []int32
	Mask                           []float32
}
