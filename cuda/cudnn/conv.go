package cudnn

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda/internal/dl"
)

// ConvSpec describes one 2-D convolution (cross-correlation, as torch): NCHW input
// [N,C,H,W], weight [K,C,KH,KW], output [N,K,OH,OW], one group.
type ConvSpec struct {
	N, C, H, W, K, KH, KW, OH, OW            int
	PadH, PadW, StrideH, StrideW, DilH, DilW int
	// Type is the element type of input, weight and output; accumulation is float32.
	Type DataType
}

// Conv holds the descriptors and chosen algorithms of a ConvSpec.
type Conv struct {
	h                             Handle
	x, y                          uintptr // tensor descriptors
	w                             uintptr // filter descriptor
	conv                          uintptr
	fwdAlgo, bwdDataAlgo, bwdFilt int
	typ                           DataType
	// FwdWorkspace, BwdDataWorkspace and BwdFilterWorkspace are the workspace bytes each
	// pass needs with its algorithm.
	FwdWorkspace, BwdDataWorkspace, BwdFilterWorkspace int
}

// maxWorkspace bounds the workspace of the algorithms chosen (1 GiB, like PyTorch's default
// limit on an 80-141 GiB GPU is far higher; this keeps the caching allocator modest).
const maxWorkspace = 1 << 30

// perf is the leading part of cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t: algo,
// status, time, memory (size_t at offset 16), determinism, mathType, reserved[3]: 48 bytes.
type perf struct {
	Algo, Status int32
	Time         float32
	_            int32
	Memory       uint64
	Determinism  int32
	MathType     int32
	_            [3]int32
}

// NewConv creates the descriptors of s on handle h and picks each pass's algorithm with
// cuDNN's heuristics (the first that succeeds within the workspace bound). Float data uses
// FMA math (no TF32, as torch with allow_tf32 off); 16-bit data may use tensor cores.
func NewConv(h Handle, s ConvSpec) (*Conv, error) {
	c := &Conv{h: h, typ: s.Type}
	if err := c.init(s); err != nil {
		c.Destroy()
		return nil, fmt.Errorf("conv %dx%dx%dx%d * %dx%dx%dx%d: %w", s.N, s.C, s.H, s.W, s.K, s.C, s.KH, s.KW, err)
	}
	return c, nil
}

func (c *Conv) init(s ConvSpec) error {
	slot := dl.New[uintptr]()
	defer runtime.KeepAlive(slot)
	mk := func(op string, i int) (uintptr, error) {
		*slot = 0
		err := call(op, i, uintptr(unsafe.Pointer(slot)))
		return *slot, err
	}
	var err error
	if c.x, err = mk("cudnnCreateTensorDescriptor", fCreateTensor); err != nil {
		return err
	}
	if c.y, err = mk("cudnnCreateTensorDescriptor", fCreateTensor); err != nil {
		return err
	}
	if c.w, err = mk("cudnnCreateFilterDescriptor", fCreateFilter); err != nil {
		return err
	}
	if c.conv, err = mk("cudnnCreateConvolutionDescriptor", fCreateConv); err != nil {
		return err
	}
	const nchw, crossCorrelation, fma, tensorOp = 0, 1, 3, 1
	math := uintptr(fma)
	if s.Type != Float {
		math = tensorOp
	}
	dt := uintptr(s.Type)
	if err := errors.Join(
		call("cudnnSetTensor4dDescriptor", fSetTensor4d, c.x, nchw, dt, uintptr(s.N), uintptr(s.C), uintptr(s.H), uintptr(s.W)),
		call("cudnnSetTensor4dDescriptor", fSetTensor4d, c.y, nchw, dt, uintptr(s.N), uintptr(s.K), uintptr(s.OH), uintptr(s.OW)),
		call("cudnnSetFilter4dDescriptor", fSetFilter4d, c.w, dt, nchw, uintptr(s.K), uintptr(s.C), uintptr(s.KH), uintptr(s.KW)),
		call("cudnnSetConvolution2dDescriptor", fSetConv2d, c.conv, uintptr(s.PadH), uintptr(s.PadW), uintptr(s.StrideH),
			uintptr(s.StrideW), uintptr(s.DilH), uintptr(s.DilW), crossCorrelation, uintptr(Float)),
		call("cudnnSetConvolutionMathType", fSetConvMath, c.conv, math),
	); err != nil {
		return err
	}
	pick := func(op string, i int, a, b, cc, d uintptr) (int, error) {
		const want = 8
		res := dl.New[[want]perf]()
		n := dl.New[int32]()
		err := call(op, i, uintptr(c.h), a, b, cc, d, want, uintptr(unsafe.Pointer(n)), uintptr(unsafe.Pointer(&res[0])))
		runtime.KeepAlive(res)
		runtime.KeepAlive(n)
		if err != nil {
			return 0, err
		}
		for k := 0; k < int(*n) && k < want; k++ {
			if res[k].Status == 0 && res[k].Memory <= maxWorkspace {
				return int(res[k].Algo), nil
			}
		}
		return 0, fmt.Errorf("%s: no algorithm within %d bytes of workspace among %d", op, maxWorkspace, *n)
	}
	size := func(op string, i int, a, b, cc, d uintptr, algo int) (int, error) {
		v := dl.New[uint64]()
		err := call(op, i, uintptr(c.h), a, b, cc, d, uintptr(algo), uintptr(unsafe.Pointer(v)))
		runtime.KeepAlive(v)
		return int(*v), err
	}
	if c.fwdAlgo, err = pick("cudnnGetConvolutionForwardAlgorithm_v7", fFwdAlgoV7, c.x, c.w, c.conv, c.y); err != nil {
		return err
	}
	if c.bwdDataAlgo, err = pick("cudnnGetConvolutionBackwardDataAlgorithm_v7", fBwdDataAlgoV7, c.w, c.y, c.conv, c.x); err != nil {
		return err
	}
	if c.bwdFilt, err = pick("cudnnGetConvolutionBackwardFilterAlgorithm_v7", fBwdFilterAlgoV7, c.x, c.y, c.conv, c.w); err != nil {
		return err
	}
	if c.FwdWorkspace, err = size("cudnnGetConvolutionForwardWorkspaceSize", fFwdWorkspace, c.x, c.w, c.conv, c.y, c.fwdAlgo); err != nil {
		return err
	}
	if c.BwdDataWorkspace, err = size("cudnnGetConvolutionBackwardDataWorkspaceSize", fBwdDataWorkspace, c.w, c.y, c.conv, c.x, c.bwdDataAlgo); err != nil {
		return err
	}
	c.BwdFilterWorkspace, err = size("cudnnGetConvolutionBackwardFilterWorkspaceSize", fBwdFilterWorkspace, c.x, c.y, c.conv, c.w, c.bwdFilt)
	return err
}

// Destroy frees the descriptors.
func (c *Conv) Destroy() {
	if c.x != 0 {
		_ = call("cudnnDestroyTensorDescriptor", fDestroyTensor, c.x)
	}
	if c.y != 0 {
		_ = call("cudnnDestroyTensorDescriptor", fDestroyTensor, c.y)
	}
	if c.w != 0 {
		_ = call("cudnnDestroyFilterDescriptor", fDestroyFilter, c.w)
	}
	if c.conv != 0 {
		_ = call("cudnnDestroyConvolutionDescriptor", fDestroyConv, c.conv)
	}
	*c = Conv{}
}

func scalars(alpha, beta float32) *[2]float32 {
	ab := dl.New[[2]float32]()
	ab[0], ab[1] = alpha, beta
	return ab
}

// Forward computes y = alpha·conv(x, w) + beta·y (device pointers; ws has FwdWorkspace bytes).
func (c *Conv) Forward(x, w, y, ws uintptr, alpha, beta float32) error {
	ab := scalars(alpha, beta)
	err := call("cudnnConvolutionForward", fForward, uintptr(c.h), uintptr(unsafe.Pointer(&ab[0])), c.x, x, c.w, w, c.conv,
		uintptr(c.fwdAlgo), ws, uintptr(c.FwdWorkspace), uintptr(unsafe.Pointer(&ab[1])), c.y, y)
	runtime.KeepAlive(ab)
	c.count(fForward, err)
	return err
}

// BackwardData computes dx = alpha·conv_transpose(dy, w) + beta·dx.
func (c *Conv) BackwardData(w, dy, dx, ws uintptr, alpha, beta float32) error {
	ab := scalars(alpha, beta)
	err := call("cudnnConvolutionBackwardData", fBackwardData, uintptr(c.h), uintptr(unsafe.Pointer(&ab[0])), c.w, w, c.y, dy,
		c.conv, uintptr(c.bwdDataAlgo), ws, uintptr(c.BwdDataWorkspace), uintptr(unsafe.Pointer(&ab[1])), c.x, dx)
	runtime.KeepAlive(ab)
	c.count(fBackwardData, err)
	return err
}

// BackwardFilter computes dw = alpha·(the weight gradient of x and dy) + beta·dw.
func (c *Conv) BackwardFilter(x, dy, dw, ws uintptr, alpha, beta float32) error {
	ab := scalars(alpha, beta)
	err := call("cudnnConvolutionBackwardFilter", fBackwardFilter, uintptr(c.h), uintptr(unsafe.Pointer(&ab[0])), c.x, x, c.y, dy,
		c.conv, uintptr(c.bwdFilt), ws, uintptr(c.BwdFilterWorkspace), uintptr(unsafe.Pointer(&ab[1])), c.w, dw)
	runtime.KeepAlive(ab)
	c.count(fBackwardFilter, err)
	return err
}

// calls counts the convolutions run, by pass (fForward, fBackwardData, fBackwardFilter) and
// data type (Float, Half, BFloat16).
var calls [3][3]atomic.Int64

func typeIndex(t DataType) int {
	switch t {
	case Half:
		return 1
	case BFloat16:
		return 2
	}
	return 0
}

func (c *Conv) count(f int, err error) {
	if err == nil {
		calls[f-fForward][typeIndex(c.typ)].Add(1)
	}
}

// Calls returns how many convolutions of the named cuDNN function
// ("cudnnConvolutionForward", "cudnnConvolutionBackwardData",
// "cudnnConvolutionBackwardFilter") on data of type t the process has run successfully:
// counters that show which path a program took (autocast's 16-bit convolutions, for
// example). Unknown names count 0.
func Calls(function string, t DataType) int64 {
	for f := fForward; f <= fBackwardFilter; f++ {
		if names[f] == function {
			return calls[f-fForward][typeIndex(t)].Load()
		}
	}
	return 0
}
