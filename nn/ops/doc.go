// Package ops holds the graph operations the project owns: layers that gorgonia v0.9.18 gets
// wrong or lacks (docs/DESIGN.md §1), written as gorgonia ops with their own backward ops, and
// fast where the time goes (convolution, pooling, normalisation).
//
// Conventions, for every op in this package:
//   - Layout is NCHW for images and row-major for everything; weights use torchvision's
//     layouts (conv [out, in/groups, kh, kw], linear [out, in]).
//   - Float32 and Float64 are both supported (float64 is what the gradient checks use);
//     other dtypes are an error, never a panic.
//   - Constructors take *G.Node inputs and return (*G.Node, error); a wrong shape is an error
//     that names the op and the shapes.
//   - Every op passes gradcheck.Check (float64 central differences) and gradcheck.Precision
//     (float32 agrees with float64) in the tests, and matches PyTorch fixtures.
//   - Ops that can reuse memory implement gorgonia's UsePreallocDoer; scratch buffers live in
//     the op and are reused across runs.
package ops
