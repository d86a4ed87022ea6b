// Command modelcheck runs a reference model once on fixed inputs and writes what it computed,
// so that a weight import can be compared with PyTorch (and the models with torchvision):
//
//	go run ./cmd/modelcheck -arch resnet50 -weights W.npz -input X.npy [-labels Y.npy] [-train] -out DIR
//
// It writes DIR/logits.npy; with -labels also DIR/loss.npy (mean cross-entropy) and
// DIR/grads.npz (d loss / d parameter, keyed by parameter name); with -train the model runs
// in train mode (batch statistics) and DIR/buffers.npz holds the BatchNorm buffers after the
// forward. W.npz is a torchvision state dict saved with
// numpy.savez(W, **{k: v.numpy() for k, v in model.state_dict().items()}); X.npy is float32
// or float64 [N, 3, H, W]; Y.npy holds N class indices (integers or floats).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/gorgonia-parallel/gp/models"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "modelcheck:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("modelcheck", flag.ContinueOnError)
	arch := fs.String("arch", "", "architecture: "+strings.Join(models.Archs(), ", "))
	weights := fs.String("weights", "", "torchvision state dict as .npz (empty: the model's own initialisation, seed 0)")
	input := fs.String("input", "", "images [N, 3, H, W] as .npy")
	labels := fs.String("labels", "", "class indices [N] as .npy (writes loss.npy and grads.npz)")
	train := fs.Bool("train", false, "train mode: batch statistics; writes buffers.npz")
	out := fs.String("out", "", "output directory")
	classes := fs.Int("num-classes", 1000, "size of the classification head")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *arch == "" || *input == "" || *out == "" {
		fs.Usage()
		return errors.New("-arch, -input and -out are required")
	}
	mod, err := models.New(*arch, *classes)
	if err != nil {
		return err
	}
	m, err := nn.NewModel(mod)
	if err != nil {
		return err
	}
	if *weights != "" {
		if err := models.LoadWeights(m.Params, *weights); err != nil {
			return err
		}
	}
	x, shape, err := readNpy(*input)
	if err != nil {
		return err
	}
	var y []float32
	if *labels != "" {
		if y, _, err = readNpy(*labels); err != nil {
			return err
		}
	}
	res, err := models.Run(m, x, shape, y, *train)
	if err != nil {
		return fmt.Errorf("%s on input %v: %w", *arch, shape, err)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	if err := checkpoint.SaveArray(filepath.Join(*out, "logits.npy"), nn.StateEntry{Shape: res.Shape, F32: res.Logits}); err != nil {
		return err
	}
	written := []string{"logits.npy"}
	if y != nil {
		if err := checkpoint.SaveArray(filepath.Join(*out, "loss.npy"), nn.StateEntry{Shape: []int{}, F32: []float32{res.Loss}}); err != nil {
			return err
		}
		if err := checkpoint.Save(filepath.Join(*out, "grads.npz"), res.Grads); err != nil {
			return err
		}
		written = append(written, "loss.npy", "grads.npz")
	}
	if *train {
		if err := checkpoint.Save(filepath.Join(*out, "buffers.npz"), res.Buffers); err != nil {
			return err
		}
		written = append(written, "buffers.npz")
	}
	fmt.Fprintf(stdout, "%s: input %v -> logits %v", *arch, shape, res.Shape)
	if y != nil {
		fmt.Fprintf(stdout, ", loss %.6f", res.Loss)
	}
	fmt.Fprintf(stdout, "; wrote %s in %s\n", strings.Join(written, ", "), *out)
	return nil
}
