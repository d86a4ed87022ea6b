// Command demo trains a small convolutional network built with nn on generated images and
// prints the loss falling and the validation accuracy rising. It is the interim `make demo`
// until the ImageNet trainer lands.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"os"
	"time"

	_ "github.com/gorgonia-parallel/gp/internal/blasimpl"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	"github.com/gorgonia-parallel/gp/optim"
	G "gorgonia.org/gorgonia"
)

const (
	classes = 10
	side    = 12
)

func main() {
	dur := flag.Duration("duration", time.Minute, "training time")
	batch := flag.Int("b", 32, "batch size")
	flag.Parse()
	if err := run(*dur, *batch); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func model() nn.Module {
	return nn.Seq(
		&nn.Conv2d{In: 3, Out: 16, Kernel: [2]int{3, 3}, Padding: [2]int{1, 1}},
		&nn.BatchNorm2d{C: 16},
		&nn.ReLU{},
		&nn.MaxPool2d{Kernel: [2]int{2, 2}},
		&nn.Conv2d{In: 16, Out: 32, Kernel: [2]int{3, 3}, Padding: [2]int{1, 1}},
		&nn.BatchNorm2d{C: 32},
		&nn.ReLU{},
		&nn.AdaptiveAvgPool2d{},
		&nn.Flatten{},
		&nn.Linear{In: 32, Out: classes},
	)
}

func build(batch int) nn.BuildFunc {
	return func(b *nn.Builder) (*G.Node, error) {
		x, err := b.Input("images", batch, 3, side, side)
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
		return ops.CrossEntropy(logits, y, 0)
	}
}

func run(dur time.Duration, batch int) error {
	m, err := nn.NewModel(model(), nn.WithSeed(1))
	if err != nil {
		return err
	}
	train, err := nn.Compile(m, build(batch))
	if err != nil {
		return err
	}
	eval, err := nn.Compile(m, build(batch), nn.Training(false))
	if err != nil {
		return err
	}
	segs, err := optim.Segments(m.Params, 5e-4)
	if err != nil {
		return err
	}
	opt, err := optim.NewSGD(segs, 0.1, optim.WithMomentum(0.9))
	if err != nil {
		return err
	}
	fmt.Printf("demo: %d parameters, batch %d, %d classes of %dx%d generated images, training for %v\n",
		m.Params.NumParams(), batch, classes, side, side, dur)
	rng := rand.New(rand.NewSource(7))
	valRng := rand.New(rand.NewSource(99))
	ctx := context.Background()
	start := time.Now()
	for epoch := 1; time.Since(start) < dur; epoch++ {
		var sum float64
		const steps = 300
		for s := 0; s < steps; s++ {
			if err := sample(train, rng); err != nil {
				return err
			}
			opt.ZeroGrad()
			if err := train.Run(ctx); err != nil {
				return err
			}
			l, _ := train.LossValue()
			sum += float64(l)
			if err := opt.Step(); err != nil {
				return err
			}
		}
		acc, err := accuracy(eval, valRng, 8)
		if err != nil {
			return err
		}
		fmt.Printf("epoch %3d  %5.1fs  loss %.4f  val acc %5.1f%%\n", epoch, time.Since(start).Seconds(), sum/steps, 100*acc)
	}
	return nil
}

// sample fills a program's inputs with a batch of generated images: class c is a bar at
// angle c·18° in colour hue c/10, at a random position, on a noisy background.
func sample(p *nn.Program, rng *rand.Rand) error {
	x, err := p.Input("images")
	if err != nil {
		return err
	}
	y, err := p.Input("labels")
	if err != nil {
		return err
	}
	plane := side * side
	for i := range y {
		c := rng.Intn(classes)
		y[i] = float32(c)
		ang := float64(c) * math.Pi / classes
		cx, cy := 4+rng.Float64()*4, 4+rng.Float64()*4
		col := hue(float64(c) / classes)
		img := x[i*3*plane : (i+1)*3*plane]
		for py := 0; py < side; py++ {
			for px := 0; px < side; px++ {
				dx, dy := float64(px)-cx, float64(py)-cy
				d := math.Abs(dx*math.Sin(ang) - dy*math.Cos(ang))
				on := math.Exp(-d * d)
				for ch := 0; ch < 3; ch++ {
					img[ch*plane+py*side+px] = float32(on*col[ch] + 0.3*rng.NormFloat64())
				}
			}
		}
	}
	return nil
}

func hue(h float64) [3]float64 {
	return [3]float64{
		0.5 + 0.5*math.Cos(2*math.Pi*h),
		0.5 + 0.5*math.Cos(2*math.Pi*(h-1.0/3)),
		0.5 + 0.5*math.Cos(2*math.Pi*(h-2.0/3)),
	}
}

func accuracy(p *nn.Program, rng *rand.Rand, batches int) (float64, error) {
	correct, total := 0, 0
	for b := 0; b < batches; b++ {
		if err := sample(p, rng); err != nil {
			return 0, err
		}
		if err := p.Run(context.Background()); err != nil {
			return 0, err
		}
		logits, err := p.Output("logits")
		if err != nil {
			return 0, err
		}
		y, _ := p.Input("labels")
		for i := range y {
			row := logits[i*classes : (i+1)*classes]
			best := 0
			for k, v := range row {
				if v > row[best] {
					best = k
				}
			}
			if best == int(y[i]) {
				correct++
			}
			total++
		}
	}
	return float64(correct) / float64(total), nil
}
