package rgb

import (
	"fmt"
	"math"
)

// Netpbm decoding (P2/P3 plain and P5/P6 raw gray and colour, maxval up to 65535). Values with a
// maxval other than 255 are rescaled to 0..255 with rounding, as Pillow's ppm decoder does.

func isPNM(b []byte) bool {
	return len(b) > 2 && b[0] == 'P' && (b[1] == '2' || b[1] == '3' || b[1] == '5' || b[1] == '6')
}

// pnmHeader parses the header and returns the size, the maxval and the offset of the pixel data.
func pnmHeader(b []byte) (w, h, maxval, off int, err error) {
	i := 2
	var vals [3]int
	for k := 0; k < 3; k++ {
		v, next, err := pnmInt(b, i)
		if err != nil {
			return 0, 0, 0, 0, fmt.Errorf("netpbm header: %v: %w", err, ErrCorrupt)
		}
		vals[k], i = v, next
	}
	w, h, maxval = vals[0], vals[1], vals[2]
	if w <= 0 || h <= 0 || maxval <= 0 || maxval > 65535 || w > 1<<16 || h > 1<<16 {
		return 0, 0, 0, 0, fmt.Errorf("netpbm header: bad size %dx%d maxval %d: %w", w, h, maxval, ErrCorrupt)
	}
	// Exactly one whitespace byte separates the header from raw data.
	return w, h, maxval, i + 1, nil
}

// pnmInt reads one decimal integer after whitespace and '#' comments.
func pnmInt(b []byte, i int) (int, int, error) {
	for i < len(b) {
		c := b[i]
		if c == '#' {
			for i < len(b) && b[i] != '\n' && b[i] != '\r' {
				i++
			}
			continue
		}
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' {
			i++
			continue
		}
		break
	}
	start, v := i, 0
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		v = v*10 + int(b[i]-'0')
		if v > math.MaxInt32 {
			return 0, i, fmt.Errorf("number too large")
		}
		i++
	}
	if i == start {
		return 0, i, fmt.Errorf("truncated or malformed number at byte %d", start)
	}
	return v, i, nil
}

func decodePNM(b []byte, dst *Image) error {
	w, h, maxval, off, err := pnmHeader(b)
	if err != nil {
		return err
	}
	color := b[1] == '3' || b[1] == '6'
	plain := b[1] == '2' || b[1] == '3'
	ch := 1
	if color {
		ch = 3
	}
	n := w * h * ch
	// Check the data is there before allocating for it: a plain sample takes at least a digit
	// and a separator, a raw one one or two bytes.
	bps := 1
	if maxval > 255 {
		bps = 2
	}
	if need := n * bps; plain {
		if 2*n-1 > len(b)-off+1 {
			return fmt.Errorf("netpbm data truncated: %d bytes cannot hold %d samples: %w", len(b)-off+1, n, ErrCorrupt)
		}
	} else if len(b)-off < need {
		return fmt.Errorf("netpbm data truncated: %d of %d bytes: %w", len(b)-off, need, ErrCorrupt)
	}
	samples := make([]int, 0, n)
	if plain {
		i := off - 1
		for len(samples) < n {
			v, next, err := pnmInt(b, i)
			if err != nil {
				return fmt.Errorf("netpbm data: %d of %d samples: %w", len(samples), n, ErrCorrupt)
			}
			samples, i = append(samples, v), next
		}
	} else {
		d := b[off:]
		for k := 0; k < n; k++ {
			if bps == 1 {
				samples = append(samples, int(d[k]))
			} else {
				samples = append(samples, int(d[2*k])<<8|int(d[2*k+1]))
			}
		}
	}
	dst.Resize(w, h)
	for k := 0; k < w*h; k++ {
		for c := 0; c < 3; c++ {
			v := samples[k*ch+min(c, ch-1)]
			if maxval != 255 {
				v = int(math.Round(float64(min(v, maxval)) * 255 / float64(maxval)))
			}
			dst.Pix[k*3+c] = uint8(v)
		}
	}
	return nil
}
