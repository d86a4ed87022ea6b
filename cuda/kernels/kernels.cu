// Kernels of the cuda package. Regenerate the committed PTX with `go generate ./cuda/kernels`
// (needs nvcc; CI never does). All tensors are contiguous; NCHW for batch norm; rows x cols
// row-major for softmax, layer norm and row/column reductions. Every kernel is extern "C"
// so its PTX entry has the plain name the Go side looks up.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define GRID_LOOP(i, n) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); i += (long long)blockDim.x * gridDim.x)

// Index arithmetic (division and remainder) in 64 bits is many times slower than in 32 bits
// on a GPU, so the indexing kernels run their body with 32-bit indices when every index fits
// and with 64-bit ones otherwise: DISPATCH(total, body) calls body<unsigned> or body<unsigned long long>.
#define DISPATCH(total, fn, ...) \
	do { if ((total) < 0x7fffffffLL) fn<unsigned>(__VA_ARGS__); else fn<unsigned long long>(__VA_ARGS__); } while (0)
#define GRID_LOOP_T(I, i, n) for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < (I)(n); i += (I)blockDim.x * gridDim.x)

template <typename I>
__device__ void im2col_body(float* col, const float* x, int n, int c, int h, int w, int kh, int kw, int sh, int sw,
		int ph, int pw, int dh, int dw, int oh, int ow) {
	I total = (I)n * c * kh * kw * oh * ow;
	GRID_LOOP_T(I, t, total) {
		I r = t / ow; int ox = (int)(t - r * ow);
		I r2 = r / oh; int oy = (int)(r - r2 * oh);
		I r3 = r2 / kw; int j = (int)(r2 - r3 * kw);
		I r4 = r3 / kh; int i = (int)(r3 - r4 * kh);
		I img = r4 / c; int ch = (int)(r4 - img * c);
		int y = oy * sh - ph + i * dh, xx = ox * sw - pw + j * dw;
		col[t] = (y >= 0 && y < h && xx >= 0 && xx < w) ? x[((img * c + ch) * h + y) * w + xx] : 0.f;
	}
}
template <typename I>
__device__ void col2im_body(float* dx, const float* col, int n, int c, int h, int w, int kh, int kw, int sh, int sw,
		int ph, int pw, int dh, int dw, int oh, int ow) {
	I total = (I)n * c * h * w;
	GRID_LOOP_T(I, t, total) {
		I r = t / w; int xx = (int)(t - r * w);
		I r2 = r / h; int y = (int)(r - r2 * h);
		I img = r2 / c; int ch = (int)(r2 - img * c);
		float s = 0.f;
		for (int i = 0; i < kh; i++) {
			int ty = y + ph - i * dh;
			if (ty < 0 || ty % sh) continue;
			int oy = ty / sh;
			if (oy >= oh) continue;
			for (int j = 0; j < kw; j++) {
				int tx = xx + pw - j * dw;
				if (tx < 0 || tx % sw) continue;
				int ox = tx / sw;
				if (ox >= ow) continue;
				s += col[(((img * c + ch) * kh + i) * kw + j) * oh * ow + (I)oy * ow + ox];
			}
		}
		dx[t] = s;
	}
}
template <typename I>
__device__ void batchnorm_apply_body(float* y, const float* x, const float* mean, const float* var, const float* gamma,
		const float* beta, int n, int c, int hw, float eps) {
	I total = (I)n * c * hw;
	GRID_LOOP_T(I, i, total) {
		int ch = (int)((i / hw) % c);
		y[i] = gamma[ch] * (x[i] - mean[ch]) * rsqrtf(var[ch] + eps) + beta[ch];
	}
}
template <typename I>
__device__ void maxpool_body(float* y, int* arg, const float* x, int n, int c, int h, int w, int kh, int kw, int sh, int sw,
		int ph, int pw, int oh, int ow) {
	I total = (I)n * c * oh * ow;
	GRID_LOOP_T(I, t, total) {
		I r = t / ow; int ox = (int)(t - r * ow);
		I nc = r / oh; int oy = (int)(r - nc * oh);
		float m = -INFINITY; int best = -1;
		for (int i = 0; i < kh; i++) {
			int yy = oy * sh - ph + i;
			if (yy < 0 || yy >= h) continue;
			for (int j = 0; j < kw; j++) {
				int xx = ox * sw - pw + j;
				if (xx < 0 || xx >= w) continue;
				float v = x[(nc * h + yy) * w + xx];
				if (v > m || best < 0 || isnan(v)) { m = v; best = yy * w + xx; if (isnan(v)) break; }
			}
		}
		y[t] = m; arg[t] = best;
	}
}

template <typename I>
__device__ void gather_rows_body(float* y, const float* x, const int* idx, long long rows, int row, long long xrows) {
	I total = (I)rows * row;
	GRID_LOOP_T(I, t, total) {
		I i = t / row; int k = (int)(t - i * row);
		int j = idx[i];
		y[t] = (j >= 0 && j < xrows) ? x[(I)j * row + k] : 0.f;
	}
}
template <typename I>
__device__ void scatter_add_rows_body(float* dx, const float* dy, const int* idx, long long rows, int row, long long xrows) {
	I total = (I)rows * row;
	GRID_LOOP_T(I, t, total) {
		I i = t / row; int k = (int)(t - i * row);
		int j = idx[i];
		if (j >= 0 && j < xrows) atomicAdd(&dx[(I)j * row + k], dy[t]);
	}
}
template <typename I>
__device__ void permute_body(float* y, const float* x, long long n, int d0, int d1, int d2, int d3, int d4,
		long long s0, long long s1, long long s2, long long s3, long long s4) {
	GRID_LOOP_T(I, t, n) {
		I r = t;
		I i4 = r % d4; r /= d4;
		I i3 = r % d3; r /= d3;
		I i2 = r % d2; r /= d2;
		I i1 = r % d1; r /= d1;
		y[t] = x[r * (I)s0 + i1 * (I)s1 + i2 * (I)s2 + i3 * (I)s3 + i4 * (I)s4];
	}
}
// Broadcast index: y viewed as [..., d1, d2, d3] and b as [d1, d3].
template <typename I>
__device__ void bcast_body(float* y, const float* x, const float* b, long long n, int d1, int d2, int d3, bool mul) {
	GRID_LOOP_T(I, e, n) {
		I q = e / d3; int k = (int)(e - q * d3);
		int j = (int)((q / d2) % d1);
		float v = b[j * d3 + k];
		y[e] = mul ? x[e] * v : x[e] + v;
	}
}

extern "C" {

__global__ void fill_f32(float* y, float v, long long n) { GRID_LOOP(i, n) y[i] = v; }
__global__ void add_f32(float* y, const float* a, const float* b, long long n) { GRID_LOOP(i, n) y[i] = a[i] + b[i]; }
__global__ void sub_f32(float* y, const float* a, const float* b, long long n) { GRID_LOOP(i, n) y[i] = a[i] - b[i]; }
__global__ void mul_f32(float* y, const float* a, const float* b, long long n) { GRID_LOOP(i, n) y[i] = a[i] * b[i]; }
// y = alpha*x + beta*y
__global__ void axpby_f32(float* y, const float* x, float alpha, float beta, long long n) { GRID_LOOP(i, n) y[i] = alpha * x[i] + beta * y[i]; }
__global__ void scale_f32(float* y, const float* x, float a, long long n) { GRID_LOOP(i, n) y[i] = a * x[i]; }
__global__ void relu_f32(float* y, const float* x, long long n) { GRID_LOOP(i, n) y[i] = x[i] > 0.f ? x[i] : 0.f; }
__global__ void relu_bwd_f32(float* dx, const float* dy, const float* x, long long n) { GRID_LOOP(i, n) dx[i] = x[i] > 0.f ? dy[i] : 0.f; }
// GELU with erf, as torch.nn.GELU() by default.
__global__ void gelu_f32(float* y, const float* x, long long n) {
	GRID_LOOP(i, n) { float v = x[i]; y[i] = 0.5f * v * (1.f + erff(v * 0.70710678118654752f)); }
}
__global__ void gelu_bwd_f32(float* dx, const float* dy, const float* x, long long n) {
	GRID_LOOP(i, n) {
		float v = x[i];
		float cdf = 0.5f * (1.f + erff(v * 0.70710678118654752f));
		float pdf = 0.3989422804014327f * expf(-0.5f * v * v);
		dx[i] = dy[i] * (cdf + v * pdf);
	}
}
// Autocast rounding in float32 storage (round to nearest even, overflow to inf), as
// amp.Round32 and torch's x.to(bf16/fp16).float().
__global__ void round_bf16_f32(float* y, const float* x, long long n) { GRID_LOOP(i, n) y[i] = __bfloat162float(__float2bfloat16_rn(x[i])); }
__global__ void round_f16_f32(float* y, const float* x, long long n) { GRID_LOOP(i, n) y[i] = __half2float(__float2half_rn(x[i])); }
__global__ void cast_f32_bf16(__nv_bfloat16* y, const float* x, long long n) { GRID_LOOP(i, n) y[i] = __float2bfloat16_rn(x[i]); }
__global__ void cast_bf16_f32(float* y, const __nv_bfloat16* x, long long n) { GRID_LOOP(i, n) y[i] = __bfloat162float(x[i]); }
__global__ void cast_f32_f16(__half* y, const float* x, long long n) { GRID_LOOP(i, n) y[i] = __float2half_rn(x[i]); }
__global__ void cast_f16_f32(float* y, const __half* x, long long n) { GRID_LOOP(i, n) y[i] = __half2float(x[i]); }
// count[0] += number of inf/NaN elements (GradScaler's found_inf).
__global__ void nonfinite_count_f32(unsigned int* count, const float* x, long long n) {
	unsigned int c = 0;
	GRID_LOOP(i, n) c += isfinite(x[i]) ? 0u : 1u;
	if (c) atomicAdd(count, c);
}

// Block-wide reductions; blockDim.x is a power of two <= 1024, shared has blockDim.x floats.
__device__ float block_sum(float v, float* sh) {
	sh[threadIdx.x] = v;
	__syncthreads();
	for (int s = blockDim.x / 2; s > 0; s >>= 1) {
		if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
		__syncthreads();
	}
	float r = sh[0];
	__syncthreads();
	return r;
}
__device__ float block_max(float v, float* sh) {
	sh[threadIdx.x] = v;
	__syncthreads();
	for (int s = blockDim.x / 2; s > 0; s >>= 1) {
		if (threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
		__syncthreads();
	}
	float r = sh[0];
	__syncthreads();
	return r;
}

// One block per row. Launch with blockDim.x*4 bytes of dynamic shared memory.
__global__ void softmax_rows_f32(float* y, const float* x, int rows, int cols) {
	extern __shared__ float sh[];
	const float* xr = x + (long long)blockIdx.x * cols;
	float* yr = y + (long long)blockIdx.x * cols;
	float m = -INFINITY;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, xr[j]);
	m = block_max(m, sh);
	float s = 0.f;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) { float e = expf(xr[j] - m); yr[j] = e; s += e; }
	s = block_sum(s, sh);
	float inv = 1.f / s;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) yr[j] *= inv;
}
// dx = y * (dy - sum(dy*y)) per row.
__global__ void softmax_bwd_rows_f32(float* dx, const float* y, const float* dy, int rows, int cols) {
	extern __shared__ float sh[];
	long long o = (long long)blockIdx.x * cols;
	float d = 0.f;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) d += dy[o + j] * y[o + j];
	d = block_sum(d, sh);
	for (int j = threadIdx.x; j < cols; j += blockDim.x) dx[o + j] = y[o + j] * (dy[o + j] - d);
}
// Layer norm over the last dimension (cols); gamma/beta may be NULL. mean and rstd get one
// value per row (for the backward pass).
__global__ void layernorm_f32(float* y, float* mean, float* rstd, const float* x, const float* gamma, const float* beta,
		int rows, int cols, float eps) {
	extern __shared__ float sh[];
	long long o = (long long)blockIdx.x * cols;
	float s = 0.f;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) s += x[o + j];
	float mu = block_sum(s, sh) / cols;
	float v = 0.f;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) { float d = x[o + j] - mu; v += d * d; }
	float r = rsqrtf(block_sum(v, sh) / cols + eps);
	for (int j = threadIdx.x; j < cols; j += blockDim.x) {
		float h = (x[o + j] - mu) * r;
		y[o + j] = (gamma ? gamma[j] : 1.f) * h + (beta ? beta[j] : 0.f);
	}
	if (threadIdx.x == 0) { mean[blockIdx.x] = mu; rstd[blockIdx.x] = r; }
}
// dx of layer norm, one block per row: dx = r*(g*dy - mean(g*dy) - xhat*mean(g*dy*xhat)).
__global__ void layernorm_bwd_f32(float* dx, const float* dy, const float* x, const float* mean, const float* rstd,
		const float* gamma, int rows, int cols) {
	extern __shared__ float sh[];
	long long o = (long long)blockIdx.x * cols;
	float mu = mean[blockIdx.x], r = rstd[blockIdx.x];
	float a = 0.f, b = 0.f;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) {
		float g = (gamma ? gamma[j] : 1.f) * dy[o + j];
		a += g; b += g * (x[o + j] - mu) * r;
	}
	a = block_sum(a, sh) / cols;
	b = block_sum(b, sh) / cols;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) {
		float g = (gamma ? gamma[j] : 1.f) * dy[o + j];
		float h = (x[o + j] - mu) * r;
		dx[o + j] = r * (g - a - h * b);
	}
}
// dgamma[j] = sum_rows dy*xhat, dbeta[j] = sum_rows dy; one thread per column.
__global__ void layernorm_bwd_params_f32(float* dgamma, float* dbeta, const float* dy, const float* x, const float* mean,
		const float* rstd, int rows, int cols) {
	GRID_LOOP(j, cols) {
		float g = 0.f, b = 0.f;
		for (int i = 0; i < rows; i++) {
			long long k = (long long)i * cols + j;
			g += dy[k] * (x[k] - mean[i]) * rstd[i];
			b += dy[k];
		}
		dgamma[j] = g; dbeta[j] = b;
	}
}
// The first pass of layernorm_bwd_params_f32 over many rows: block (bx, by) sums rows
// [by*chunk, (by+1)*chunk) of columns [32*bx, 32*bx+32), its 256 threads as 32 columns by 8
// row lanes (each lane strides 8 rows: coalesced), the lanes added in order through shared
// memory (2*256 floats), into pg[by*cols + j] and pb[by*cols + j]; sum_axis_f32 over the
// gridDim.y parts finishes, in order (deterministic).
__global__ void layernorm_bwd_params_part_f32(float* pg, float* pb, const float* dy, const float* x, const float* mean,
		const float* rstd, int rows, int cols, int chunk) {
	extern __shared__ float sh[];
	int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
	int j = blockIdx.x * 32 + tx;
	int i0 = blockIdx.y * chunk, i1 = rows - i0 < chunk ? rows : i0 + chunk;
	float g = 0.f, b = 0.f;
	if (j < cols)
		for (int i = i0 + ty; i < i1; i += 8) {
			long long k = (long long)i * cols + j;
			g += dy[k] * (x[k] - mean[i]) * rstd[i];
			b += dy[k];
		}
	sh[threadIdx.x] = g; sh[256 + threadIdx.x] = b;
	__syncthreads();
	if (ty == 0 && j < cols) {
		for (int r = 1; r < 8; r++) { g += sh[r * 32 + tx]; b += sh[256 + r * 32 + tx]; }
		long long o = (long long)blockIdx.y * cols + j;
		pg[o] = g; pb[o] = b;
	}
}
// Batch statistics of NCHW x, one block per channel: mean and biased variance.
__global__ void batchnorm_stats_f32(float* mean, float* var, const float* x, int n, int c, int hw) {
	extern __shared__ float sh[];
	int ch = blockIdx.x;
	float m = (float)n * hw;
	float s = 0.f;
	for (int i = 0; i < n; i++) {
		const float* xp = x + ((long long)i * c + ch) * hw;
		for (int k = threadIdx.x; k < hw; k += blockDim.x) s += xp[k];
	}
	float mu = block_sum(s, sh) / m;
	float v = 0.f;
	for (int i = 0; i < n; i++) {
		const float* xp = x + ((long long)i * c + ch) * hw;
		for (int k = threadIdx.x; k < hw; k += blockDim.x) { float d = xp[k] - mu; v += d * d; }
	}
	v = block_sum(v, sh) / m;
	if (threadIdx.x == 0) { mean[ch] = mu; var[ch] = v; }
}
// y = gamma*(x-mean)*rsqrt(var+eps) + beta over NCHW.
__global__ void batchnorm_apply_f32(float* y, const float* x, const float* mean, const float* var, const float* gamma,
		const float* beta, int n, int c, int hw, float eps) {
	DISPATCH((long long)n * c * hw, batchnorm_apply_body, y, x, mean, var, gamma, beta, n, c, hw, eps);
}
// running = (1-momentum)*running + momentum*batch, with the unbiased variance, as torch.
__global__ void batchnorm_running_f32(float* rmean, float* rvar, const float* mean, const float* var, int c, float momentum,
		float unbias) {
	GRID_LOOP(j, c) {
		rmean[j] = (1.f - momentum) * rmean[j] + momentum * mean[j];
		rvar[j] = (1.f - momentum) * rvar[j] + momentum * var[j] * unbias;
	}
}
// Training-mode backward, one block per channel: dgamma, dbeta and dx.
__global__ void batchnorm_bwd_f32(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
		const float* mean, const float* var, const float* gamma, int n, int c, int hw, float eps) {
	extern __shared__ float sh[];
	int ch = blockIdx.x;
	float m = (float)n * hw;
	float mu = mean[ch], r = rsqrtf(var[ch] + eps);
	float sdy = 0.f, sdyh = 0.f;
	for (int i = 0; i < n; i++) {
		long long o = ((long long)i * c + ch) * hw;
		for (int k = threadIdx.x; k < hw; k += blockDim.x) { sdy += dy[o + k]; sdyh += dy[o + k] * (x[o + k] - mu) * r; }
	}
	sdy = block_sum(sdy, sh);
	sdyh = block_sum(sdyh, sh);
	if (threadIdx.x == 0) { dgamma[ch] = sdyh; dbeta[ch] = sdy; }
	float g = gamma[ch] * r / m;
	for (int i = 0; i < n; i++) {
		long long o = ((long long)i * c + ch) * hw;
		for (int k = threadIdx.x; k < hw; k += blockDim.x) dx[o + k] = g * (m * dy[o + k] - sdy - (x[o + k] - mu) * r * sdyh);
	}
}
// y[i] = sum_j x[i,j]; one block per row.
__global__ void sum_rows_f32(float* y, const float* x, int rows, int cols) {
	extern __shared__ float sh[];
	long long o = (long long)blockIdx.x * cols;
	float s = 0.f;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) s += x[o + j];
	s = block_sum(s, sh);
	if (threadIdx.x == 0) y[blockIdx.x] = s;
}
// y[j] = sum_i x[i,j] (bias gradients); one thread per column.
__global__ void sum_cols_f32(float* y, const float* x, int rows, int cols) {
	GRID_LOOP(j, cols) {
		float s = 0.f;
		for (int i = 0; i < rows; i++) s += x[(long long)i * cols + j];
		y[j] = s;
	}
}
// y[n,c] = mean over hw of NCHW x (global average pooling) and its backward.
__global__ void avgpool_global_f32(float* y, const float* x, int nc, int hw) {
	GRID_LOOP(i, nc) {
		float s = 0.f;
		for (int k = 0; k < hw; k++) s += x[i * (long long)hw + k];
		y[i] = s / hw;
	}
}
__global__ void avgpool_global_bwd_f32(float* dx, const float* dy, int nc, int hw) {
	long long total = (long long)nc * hw;
	GRID_LOOP(i, total) dx[i] = dy[i / hw] / hw;
}

// im2col of a batch of NCHW images: col[n][(c*kh+i)*kw+j][oy*ow+ox] = x[n][c][oy*s-p+i*d][ox*s-p+j*d]
// (0 outside), so that conv = W[oc][c*kh*kw] · col[n] for every image n.
__global__ void im2col_f32(float* col, const float* x, int n, int c, int h, int w, int kh, int kw, int sh, int sw,
		int ph, int pw, int dh, int dw, int oh, int ow) {
	DISPATCH((long long)n * c * kh * kw * oh * ow, im2col_body, col, x, n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow);
}
// col2im, the adjoint of im2col: each input pixel sums the columns that read it (no atomics).
__global__ void col2im_f32(float* dx, const float* col, int n, int c, int h, int w, int kh, int kw, int sh, int sw,
		int ph, int pw, int dh, int dw, int oh, int ow) {
	DISPATCH((long long)n * c * kh * kw * oh * ow, col2im_body, dx, col, n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow);
}
// Max pooling over NCHW with padding (-inf outside); arg keeps the flat input index of each
// maximum (first one on ties, as torch) for the backward pass.
__global__ void maxpool_f32(float* y, int* arg, const float* x, int n, int c, int h, int w, int kh, int kw, int sh, int sw,
		int ph, int pw, int oh, int ow) {
	DISPATCH((long long)n * c * h * w, maxpool_body, y, arg, x, n, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow);
}
// dx (zeroed by the caller) += dy at each window's maximum.
__global__ void maxpool_bwd_f32(float* dx, const float* dy, const int* arg, int nc, int hw, int ohw) {
	long long total = (long long)nc * ohw;
	GRID_LOOP(t, total) {
		if (arg[t] >= 0) atomicAdd(&dx[(t / ohw) * hw + arg[t]], dy[t]);
	}
}
// Cross-entropy with integer labels, one block per row: loss[i] = logsumexp(x_i) - x_i[label_i];
// prob keeps softmax(x_i) for the backward pass.
__global__ void cross_entropy_f32(float* loss, float* prob, const float* x, const int* label, int rows, int cols) {
	extern __shared__ float sh[];
	long long o = (long long)blockIdx.x * cols;
	float m = -INFINITY;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, x[o + j]);
	m = block_max(m, sh);
	float s = 0.f;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) { float e = expf(x[o + j] - m); prob[o + j] = e; s += e; }
	s = block_sum(s, sh);
	for (int j = threadIdx.x; j < cols; j += blockDim.x) prob[o + j] /= s;
	if (threadIdx.x == 0) loss[blockIdx.x] = logf(s) + m - x[o + label[blockIdx.x]];
}
// dx = scale*(prob - onehot(label)) (scale = 1/rows for the mean loss).
__global__ void cross_entropy_bwd_f32(float* dx, const float* prob, const int* label, int rows, int cols, float scale) {
	long long total = (long long)rows * cols;
	GRID_LOOP(t, total) {
		int i = t / cols, j = t % cols;
		dx[t] = scale * (prob[t] - (j == label[i] ? 1.f : 0.f));
	}
}
// y[i,j] += b[j] (a linear layer's bias) over rows x cols.
__global__ void add_bias_rows_f32(float* y, const float* b, int rows, int cols) {
	long long total = (long long)rows * cols;
	GRID_LOOP(t, total) y[t] += b[t % cols];
}

// y[i, :] = x[idx[i], :] for rows of row elements, zero where idx[i] < 0 (or past x's
// xrows rows): Swin's padding, cyclic shift and window partition in one pass, its window
// reverse and PatchMerging's strided concatenation, and the relative-position bias lookup.
__global__ void gather_rows_f32(float* y, const float* x, const int* idx, long long rows, int row, long long xrows) {
	DISPATCH((long long)rows * row, gather_rows_body, y, x, idx, rows, row, xrows);
}
// dx[idx[i], :] += dy[i, :], the adjoint of gather_rows (dx is not cleared; atomics, since
// an index may repeat, as in the bias-table gradient).
__global__ void scatter_add_rows_f32(float* dx, const float* dy, const int* idx, long long rows, int row, long long xrows) {
	DISPATCH((long long)rows * row, scatter_add_rows_body, dx, dy, idx, rows, row, xrows);
}
// y (contiguous, dims d0..d4) = x read with strides s0..s4 per output dimension: torch's
// x.permute(...).contiguous() for up to five dimensions.
__global__ void permute_f32(float* y, const float* x, long long n, int d0, int d1, int d2, int d3, int d4,
		long long s0, long long s1, long long s2, long long s3, long long s4) {
	DISPATCH(n, permute_body, y, x, n, d0, d1, d2, d3, d4, s0, s1, s2, s3, s4);
}
// y = x + b and y = x * b with b [d1, d3] broadcast over y's leading dimensions and d2.
__global__ void add_bcast_f32(float* y, const float* x, const float* b, long long n, int d1, int d2, int d3) {
	DISPATCH(n, bcast_body, y, x, b, n, d1, d2, d3, false);
}
__global__ void mul_bcast_f32(float* y, const float* x, const float* b, long long n, int d1, int d2, int d3) {
	DISPATCH(n, bcast_body, y, x, b, n, d1, d2, d3, true);
}

// The graph executor's (cuda/tape) elementwise, reduction and repeat kernels: one kernel per
// kind, the operation a code, so that gorgonia's many pointwise ops cost four entries. The
// codes are those of cuda.UnaryOp and cuda.BinaryOp (ops_pointwise.go); the float32 formulas
// are gorgonia's (math_nooptim.go), so the device computes what the TapeMachine computes.
__global__ void unary_f32(float* y, const float* x, int op, long long n) {
	GRID_LOOP(i, n) {
		float v = x[i], r;
		switch (op) {
		case 0: r = fabsf(v); break;
		case 1: r = signbit(v) ? -1.f : 1.f; break;
		case 2: r = ceilf(v); break;
		case 3: r = floorf(v); break;
		case 4: r = sinf(v); break;
		case 5: r = cosf(v); break;
		case 6: r = expf(v); break;
		case 7: r = logf(v); break;
		case 8: r = log2f(v); break;
		case 9: r = -v; break;
		case 10: r = v * v; break;
		case 11: r = sqrtf(v); break;
		case 12: r = 1.f / v; break;
		case 13: r = 1.f / sqrtf(v); break;
		case 14: r = v * v * v; break;
		case 15: r = tanhf(v); break;
		case 16: r = v < -88.f ? 0.f : v > 15.f ? 1.f : 1.f / (1.f + expf(-v)); break;
		case 17: r = log1pf(v); break;
		case 18: r = expm1f(v); break;
		case 19: r = v < -103.f ? 0.f : v > 14.f ? v : log1pf(expf(v)); break;
		default: r = NAN;
		}
		y[i] = r;
	}
}
// y = a op b; a (b) is read at index 0 when sa (sb) is 0: a scalar against a tensor.
// Comparisons give 1 or 0, as gorgonia's with retSame.
__global__ void binary_f32(float* y, const float* a, const float* b, int op, long long n, int sa, int sb) {
	GRID_LOOP(i, n) {
		float u = a[sa ? i : 0], v = b[sb ? i : 0], r;
		switch (op) {
		case 0: r = u + v; break;
		case 1: r = u - v; break;
		case 2: r = u * v; break;
		case 3: r = u / v; break;
		case 4: r = powf(u, v); break;
		case 5: r = u < v ? 1.f : 0.f; break;
		case 6: r = u > v ? 1.f : 0.f; break;
		case 7: r = u <= v ? 1.f : 0.f; break;
		case 8: r = u >= v ? 1.f : 0.f; break;
		case 9: r = u == v ? 1.f : 0.f; break;
		case 10: r = u != v ? 1.f : 0.f; break;
		default: r = NAN;
		}
		y[i] = r;
	}
}
// y[o, i] = sum_j x[o, j, i] over x viewed as [outer, k, inner], in order of j.
__global__ void sum_axis_f32(float* y, const float* x, long long outer, long long k, long long inner) {
	long long total = outer * inner;
	GRID_LOOP(t, total) {
		long long o = t / inner, i = t - o * inner;
		const float* p = x + o * k * inner + i;
		float s = 0.f;
		for (long long j = 0; j < k; j++) s += p[j * inner];
		y[t] = s;
	}
}
// The first pass of sum_axis_f32 for a long axis and few outputs: block (bx, by, bz) sums
// j in [by*chunk, (by+1)*chunk) of x[bz, j, i] for i in [32*bx, 32*bx+32), its 256 threads
// as 32 values of i by 8 lanes of j (coalesced), the lanes added in order through shared
// memory (256 floats), into part[bz, by, i] (part is [outer, gridDim.y, inner]);
// sum_axis_f32 over the parts finishes, in order (deterministic).
__global__ void sum_axis_part_f32(float* part, const float* x, long long k, long long inner, long long chunk) {
	extern __shared__ float sh[];
	int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
	long long i = (long long)blockIdx.x * 32 + tx;
	long long j0 = (long long)blockIdx.y * chunk, j1 = k - j0 < chunk ? k : j0 + chunk;
	const float* p = x + (long long)blockIdx.z * k * inner;
	float s = 0.f;
	if (i < inner)
		for (long long j = j0 + ty; j < j1; j += 8) s += p[j * inner + i];
	sh[threadIdx.x] = s;
	__syncthreads();
	if (ty == 0 && i < inner) {
		for (int r = 1; r < 8; r++) s += sh[r * 32 + tx];
		part[((long long)blockIdx.z * gridDim.y + blockIdx.y) * inner + i] = s;
	}
}
// y [outer, d*rep, inner] repeats every x [outer, d, inner] slice rep times along the middle
// axis (numpy.repeat, gorgonia's Repeat; a broadcast when d is 1).
__global__ void repeat_axis_f32(float* y, const float* x, long long outer, int d, int rep, long long inner) {
	long long total = outer * d * rep * inner;
	GRID_LOOP(t, total) {
		long long i = t % inner, r = t / inner;
		long long jr = r % ((long long)d * rep), o = r / ((long long)d * rep);
		y[t] = x[(o * d + jr / rep) * inner + i];
	}
}

// Cross-entropy of logits x [rows, cols] against class indices held as floats (nn/ops's
// labels), with label smoothing s, one block per row: loss[i] = (1-s)·(lse - x[label]) +
// s·(lse - mean_j x[j]), NaN for a label outside [0, cols). Sums as cross_entropy_f32.
__global__ void cross_entropy_ls_f32(float* loss, const float* x, const float* label, int rows, int cols, float s) {
	extern __shared__ float sh[];
	long long o = (long long)blockIdx.x * cols;
	float m = -INFINITY;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, x[o + j]);
	m = block_max(m, sh);
	float e = 0.f, t = 0.f;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) { e += expf(x[o + j] - m); t += x[o + j]; }
	e = block_sum(e, sh);
	t = block_sum(t, sh);
	if (threadIdx.x == 0) {
		float lf = label[blockIdx.x];
		int c = (int)lf;
		float lse = logf(e) + m;
		loss[blockIdx.x] = ((float)c != lf || c < 0 || c >= cols) ? NAN : (1.f - s) * (lse - x[o + c]) + s * (lse - t / cols);
	}
}
// Its gradient, one block per row: dx = g[0]/rows·(softmax(x) - (1-s)·onehot(label) - s/cols),
// with g the loss's gradient (a device scalar).
__global__ void cross_entropy_ls_bwd_f32(float* dx, const float* x, const float* label, const float* g, int rows, int cols, float s) {
	extern __shared__ float sh[];
	long long o = (long long)blockIdx.x * cols;
	float m = -INFINITY;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, x[o + j]);
	m = block_max(m, sh);
	float e = 0.f;
	for (int j = threadIdx.x; j < cols; j += blockDim.x) e += expf(x[o + j] - m);
	e = block_sum(e, sh);
	float scale = g[0] / rows, off = s / cols, lse = logf(e) + m;
	int c = (int)label[blockIdx.x];
	for (int j = threadIdx.x; j < cols; j += blockDim.x)
		dx[o + j] = scale * (expf(x[o + j] - lse) - off - (j == c ? 1.f - s : 0.f));
}
// Dropout and DropPath with nn/ops's counter-based mask: element i belongs to draw i/row,
// kept when SplitMix64(key + draw·golden) >> 11 >= thresh (nn/ops.DropMask.Threshold), so
// the device drops exactly what the CPU drops; kept elements are scaled.
__global__ void dropout_f32(float* y, const float* x, unsigned long long key, unsigned long long thresh, float scale,
		long long n, long long row) {
	GRID_LOOP(i, n) {
		unsigned long long z = key + (unsigned long long)(i / row) * 0x9e3779b97f4a7c15ULL;
		z ^= z >> 30; z *= 0xbf58476d1ce4e5b9ULL;
		z ^= z >> 27; z *= 0x94d049bb133111ebULL;
		z ^= z >> 31;
		y[i] = (z >> 11) >= thresh ? x[i] * scale : 0.f;
	}
}

// Optimizers on the device (cuda/tape's device state), element for element the loops of
// package optim, so that a step on the device equals optim's on the CPU (up to the FMA a
// GPU compiler may contract). sgd_f32 is optim.SGD.update: flags 1 has a momentum buffer,
// 2 the buffer starts this step, 4 Nesterov, 8 maximize.
__global__ void sgd_f32(float* p, const float* g, float* buf, float negLR, float mom, float damp, float wd, int flags, long long n) {
	GRID_LOOP(i, n) {
		float d = g[i];
		if (flags & 8) d = -d;
		if (wd != 0.f) d += wd * p[i];
		if (flags & 1) {
			float b = (flags & 2) ? d : buf[i] * mom + damp * d;
			buf[i] = b;
			if (flags & 4) d += mom * b; else d = b;
		}
		p[i] += negLR * d;
	}
}
// adam_f32 is optim.Adam's adamKernel (Adam and AdamW): flags 1 decoupled (AdamW), 2
// maximize, 4 AMSGrad (vmax is read and written only then).
__global__ void adam_f32(float* p, const float* g, float* m, float* v, float* vmax, float decay, float wd, float b1, float omb1,
		float b2, float omb2, float bc2sqrt, float eps, float negStep, int flags, long long n) {
	GRID_LOOP(i, n) {
		float gi = g[i];
		if (flags & 2) gi = -gi;
		float pi = p[i];
		if (flags & 1) pi *= decay;
		else if (wd != 0.f) gi += wd * pi;
		float mi = m[i] * b1 + omb1 * gi;
		float vi = v[i] * b2 + omb2 * gi * gi;
		m[i] = mi;
		v[i] = vi;
		if (flags & 4) { vi = fmaxf(vmax[i], vi); vmax[i] = vi; }
		float denom = sqrtf(vi) / bc2sqrt + eps;
		p[i] = pi + negStep * mi / denom;
	}
}

// Autocast's 16-bit operands (cuda/tape, ops_amp.go). round_cast_* round x once to the
// 16-bit format and store it twice: in 16 bits (h, what the 16-bit GEMMs and convolutions
// read) and widened back to float32 (y, what float32 ops read), in one pass.
__global__ void round_cast_f32_bf16(float* y, __nv_bfloat16* h, const float* x, long long n) {
	GRID_LOOP(i, n) { __nv_bfloat16 r = __float2bfloat16_rn(x[i]); h[i] = r; y[i] = __bfloat162float(r); }
}
__global__ void round_cast_f32_f16(float* y, __half* h, const float* x, long long n) {
	GRID_LOOP(i, n) { __half r = __float2half_rn(x[i]); h[i] = r; y[i] = __half2float(r); }
}
} // extern "C" (a template cannot have C linkage)

// im2col (im2col_f32's layout) of 16-bit images, bf16 or fp16 alike: elements are moved, not
// converted, and the padding is +0 in both formats.
template <typename I>
__device__ void im2col_x16_body(unsigned short* col, const unsigned short* x, int n, int c, int h, int w, int kh, int kw,
		int sh, int sw, int ph, int pw, int dh, int dw, int oh, int ow) {
	I total = (I)n * c * kh * kw * oh * ow;
	GRID_LOOP_T(I, t, total) {
		I r = t / ow; int ox = (int)(t - r * ow);
		I r2 = r / oh; int oy = (int)(r - r2 * oh);
		I r3 = r2 / kw; int j = (int)(r2 - r3 * kw);
		I r4 = r3 / kh; int i = (int)(r3 - r4 * kh);
		I img = r4 / c; int ch = (int)(r4 - img * c);
		int y = oy * sh - ph + i * dh, xx = ox * sw - pw + j * dw;
		col[t] = (y >= 0 && y < h && xx >= 0 && xx < w) ? x[((img * c + ch) * h + y) * w + xx] : (unsigned short)0;
	}
}
extern "C" {
__global__ void im2col_x16(unsigned short* col, const unsigned short* x, int n, int c, int h, int w, int kh, int kw, int sh,
		int sw, int ph, int pw, int dh, int dw, int oh, int ow) {
	DISPATCH((long long)n * c * kh * kw * oh * ow, im2col_x16_body, col, x, n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow);
}

} // extern "C"

extern "C" {
// GradScaler's unscale_ and found_inf in one pass: x *= inv, count[0] += the number of
// products that are inf or NaN (amp.GradScaler.Unscale checks the unscaled values too).
__global__ void unscale_nonfinite_f32(unsigned int* count, float* x, float inv, long long n) {
	unsigned int c = 0;
	GRID_LOOP(i, n) { float v = x[i] * inv; x[i] = v; c += isfinite(v) ? 0u : 1u; }
	if (c) atomicAdd(count, c);
}
// Sum of squares, first pass: part[blockIdx.x] = the block's sum of x[i]^2 in double (each
// thread's grid-stride share, then a fixed-order tree over the block: the same result for
// the same launch). Launch with blockDim.x (a power of two) * 8 bytes of shared memory,
// declared as the other kernels' float array and used as doubles.
__global__ void sumsq_part_f32(double* part, const float* x, long long n) {
	extern __shared__ float sh[];
	double* shd = (double*)sh;
	double s = 0;
	GRID_LOOP(i, n) { double v = (double)x[i]; s += v * v; }
	shd[threadIdx.x] = s;
	__syncthreads();
	for (int k = blockDim.x / 2; k > 0; k >>= 1) {
		if (threadIdx.x < k) shd[threadIdx.x] += shd[threadIdx.x + k];
		__syncthreads();
	}
	if (threadIdx.x == 0) part[blockIdx.x] = shd[0];
}
// Second pass: y[0] = the sum of part[0..n) in order (one thread; n is a grid's block count).
__global__ void sum_f64_serial(double* y, const double* part, int n) {
	if (blockIdx.x != 0 || threadIdx.x != 0) return;
	double s = 0;
	for (int i = 0; i < n; i++) s += part[i];
	y[0] = s;
}
} // extern "C"
