package nn

import (
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
)

// Classify is the usual image-classification graph of a model for a batch of batch samples:
// it declares the inputs "images" [batch, shape...] and "labels" [batch] (class indices as
// floats), runs the model, names its output "logits", and in train mode returns the mean
// cross-entropy with the given label smoothing (PyTorch's CrossEntropyLoss).
func Classify(batch int, shape []int, smoothing float64) BuildFunc {
	return func(b *Builder) (*G.Node, error) {
		x, err := b.Input("images", append([]int{batch}, shape...)...)
		if err != nil {
			return nil, err
		}
		y, err := b.Input("labels", batch)
		if err != nil {
			return nil, err
		}
		logits, err := b.Forward(x)
		if err != nil {
			return nil, err
		}
		b.Output("logits", logits)
		if !b.Training() {
			return nil, nil
		}
		return ops.CrossEntropy(logits, y, smoothing)
	}
}
