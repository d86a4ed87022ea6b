//go:build cgo

package rgb

/*
#cgo LDFLAGS: -ljpeg
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <jpeglib.h>
#include <jerror.h>

struct gp_err {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
	int eof;
	char msg[JMSG_LENGTH_MAX];
};

static void gp_error_exit(j_common_ptr c) {
	struct gp_err *e = (struct gp_err *)c->err;
	(*c->err->format_message)(c, e->msg);
	longjmp(e->jb, 1);
}

// PIL refuses truncated files ("image file is truncated"); libjpeg only warns, so note it.
static void gp_emit(j_common_ptr c, int level) {
	struct gp_err *e = (struct gp_err *)c->err;
	if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) e->eof = 1;
}

// gp_size reads the header only.
static int gp_size(unsigned char *buf, unsigned long n, int *w, int *h, char *msg) {
	struct jpeg_decompress_struct ci;
	struct gp_err e;
	memset(&e, 0, sizeof e);
	ci.err = jpeg_std_error(&e.pub);
	e.pub.error_exit = gp_error_exit;
	e.pub.emit_message = gp_emit;
	if (setjmp(e.jb)) {
		strncpy(msg, e.msg, JMSG_LENGTH_MAX);
		jpeg_destroy_decompress(&ci);
		return -1;
	}
	jpeg_create_decompress(&ci);
	jpeg_mem_src(&ci, buf, n);
	jpeg_read_header(&ci, TRUE);
	*w = ci.image_width;
	*h = ci.image_height;
	jpeg_destroy_decompress(&ci);
	return 0;
}

// gp_decode decodes rows [ry0, ry1) and at least columns [rx0, rx1) of the image scaled by
// 1/denom into out (capacity cap bytes). info receives x offset, width, height, channels (3 RGB,
// 4 inverted CMYK as PIL's "CMYK;I"), the size needed when cap is too small (return 1) and the
// first row decoded. A header without pixels or with more than maxpix returns 2 with the
// header's width and height in info[1] and info[2], before jpeg_start_decompress: for a
// progressive file that call allocates coefficients for the whole image and reads every scan,
// gigabytes and seconds for a few hundred bytes claiming 30000x30000.
static int gp_decode(unsigned char *buf, unsigned long n, int denom, int rx0, int ry0, int rx1, int ry1,
                     unsigned char *out, unsigned long cap, unsigned long maxpix, int *info, char *msg) {
	struct jpeg_decompress_struct ci;
	struct gp_err e;
	memset(&e, 0, sizeof e);
	ci.err = jpeg_std_error(&e.pub);
	e.pub.error_exit = gp_error_exit;
	e.pub.emit_message = gp_emit;
	if (setjmp(e.jb)) {
		strncpy(msg, e.msg, JMSG_LENGTH_MAX);
		jpeg_destroy_decompress(&ci);
		return -1;
	}
	jpeg_create_decompress(&ci);
	jpeg_mem_src(&ci, buf, n);
	jpeg_read_header(&ci, TRUE);
	if (ci.image_width == 0 || ci.image_height == 0 ||
	    (unsigned long long)ci.image_width * ci.image_height > maxpix) {
		info[1] = ci.image_width;
		info[2] = ci.image_height;
		jpeg_destroy_decompress(&ci);
		return 2;
	}
	int nc = 3;
	if (ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK) {
		ci.out_color_space = JCS_CMYK;
		nc = 4;
	} else {
		ci.out_color_space = JCS_RGB;
	}
	ci.scale_num = 1;
	ci.scale_denom = denom;
	ci.dct_method = JDCT_ISLOW;
	jpeg_start_decompress(&ci);
	int W = ci.output_width, H = ci.output_height;
	if (rx1 <= rx0 || ry1 <= ry0) { rx0 = 0; ry0 = 0; rx1 = W; ry1 = H; }
	if (rx0 < 0) rx0 = 0;
	if (ry0 < 0) ry0 = 0;
	if (rx1 > W) rx1 = W;
	if (ry1 > H) ry1 = H;
	if (rx1 <= rx0 || ry1 <= ry0) { rx0 = 0; ry0 = 0; rx1 = W; ry1 = H; }
	// Fancy upsampling treats a crop's sides as image edges, so decode one iMCU (16 columns at
	// 4:2:0) more on each side to keep the wanted columns bit-exact (TestRegionDecodeRandom).
	rx0 = rx0 > 16 ? rx0 - 16 : 0;
	rx1 = rx1 + 16 < W ? rx1 + 16 : W;
	JDIMENSION xoff = rx0, cw = rx1 - rx0;
	if (cw < (JDIMENSION)W) jpeg_crop_scanline(&ci, &xoff, &cw);
	int rows = ry1 - ry0;
	unsigned long need = (unsigned long)cw * rows * nc;
	info[0] = xoff; info[1] = cw; info[2] = rows; info[3] = nc; info[4] = (int)need; info[5] = ry0;
	if (need > cap) {
		jpeg_destroy_decompress(&ci);
		return 1;
	}
	if (ry0 > 0) jpeg_skip_scanlines(&ci, ry0);
	int stride = cw * nc;
	while ((int)ci.output_scanline < ry1) {
		JSAMPROW row = out + (unsigned long)(ci.output_scanline - ry0) * stride;
		jpeg_read_scanlines(&ci, &row, 1);
	}
	if (ci.output_scanline == ci.output_height) jpeg_finish_decompress(&ci);
	else jpeg_abort_decompress(&ci);
	jpeg_destroy_decompress(&ci);
	if (e.eof) {
		strncpy(msg, "premature end of JPEG file (truncated)", JMSG_LENGTH_MAX);
		return -1;
	}
	return 0;
}
*/
import "C"

import (
	"fmt"
	"image"
	"unsafe"
)

const haveTurbo = true

func jpegSize(data []byte) (int, int, error) {
	var w, h C.int
	var msg [C.JMSG_LENGTH_MAX]C.char
	if C.gp_size((*C.uchar)(unsafe.Pointer(&data[0])), C.ulong(len(data)), &w, &h, &msg[0]) != 0 {
		return 0, 0, fmt.Errorf("jpeg: %s: %w", C.GoString(&msg[0]), ErrCorrupt)
	}
	return int(w), int(h), nil
}

func decodeJPEGTurbo(data []byte, r image.Rectangle, denom int, dst *Image) (image.Point, int, error) {
	switch denom {
	case 1, 2, 4, 8:
	default:
		denom = 1
	}
	var info [6]C.int
	var msg [C.JMSG_LENGTH_MAX]C.char
	out := dst.Pix[:cap(dst.Pix)]
	for attempt := 0; attempt < 2; attempt++ {
		var outp *C.uchar
		if len(out) > 0 {
			outp = (*C.uchar)(unsafe.Pointer(&out[0]))
		}
		rc := C.gp_decode((*C.uchar)(unsafe.Pointer(&data[0])), C.ulong(len(data)), C.int(denom),
			C.int(r.Min.X), C.int(r.Min.Y), C.int(r.Max.X), C.int(r.Max.Y),
			outp, C.ulong(len(out)), C.ulong(MaxPixels), &info[0], &msg[0])
		if rc < 0 {
			return image.Point{}, denom, fmt.Errorf("jpeg: %s: %w", C.GoString(&msg[0]), ErrCorrupt)
		}
		if rc == 2 {
			return image.Point{}, denom, fmt.Errorf("jpeg: %w", checkPixels(int(info[1]), int(info[2])))
		}
		if rc == 0 {
			break
		}
		// Room for the CMYK→RGB conversion in place needs the 4-channel size; the header
		// was checked against MaxPixels, so it is at most 4·MaxPixels bytes and fits the C
		// int that reports it.
		need := int(info[4])
		out = make([]byte, need)
		if attempt == 1 {
			return image.Point{}, denom, fmt.Errorf("jpeg: decoder buffer size changed: %w", ErrCorrupt)
		}
	}
	x0, w, h, nc := int(info[0]), int(info[1]), int(info[2]), int(info[3])
	y0 := int(info[5])
	if nc == 4 {
		// PIL reads CMYK JPEGs as "CMYK;I" (Adobe's inverted convention) then applies cmyk2rgb;
		// converting forward in place is safe because the 3-byte output trails the 4-byte input.
		for i, o := 0, 0; i < w*h*4; i, o = i+4, o+3 {
			out[o], out[o+1], out[o+2] = cmyk2rgb(255-out[i], 255-out[i+1], 255-out[i+2], 255-out[i+3])
		}
	}
	dst.W, dst.H, dst.Pix = w, h, out[:w*h*3]
	return image.Point{X: x0, Y: y0}, denom, nil
}
