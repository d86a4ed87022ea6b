//go:build !cgo

package rgb

import (
	"bytes"
	"fmt"
	"image"
	"image/jpeg"
)

// Without cgo, JPEGs go through image/jpeg: the whole image, no DCT scaling.
const haveTurbo = false

func jpegSize(data []byte) (int, int, error) {
	cfg, err := jpeg.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return 0, 0, fmt.Errorf("jpeg: %v: %w", err, ErrCorrupt)
	}
	return cfg.Width, cfg.Height, nil
}

func decodeJPEGTurbo([]byte, image.Rectangle, int, *Image) (image.Point, int, error) {
	return image.Point{}, 1, fmt.Errorf("jpeg: libjpeg-turbo needs cgo: %w", ErrCorrupt)
}
