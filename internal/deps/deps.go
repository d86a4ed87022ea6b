//go:build tools

// Package deps pins module dependencies that the project uses before code imports them.
package deps

import (
	_ "codeberg.org/sbinet/npyio"
	_ "github.com/stretchr/testify/require"
	_ "go4.org/unsafe/assume-no-moving-gc"
	_ "gonum.org/v1/gonum/blas/blas32"
	_ "gonum.org/v1/netlib/blas/netlib"
	_ "gorgonia.org/gorgonia"
	_ "gorgonia.org/tensor"
)
