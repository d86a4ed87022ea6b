package zero

import (
	"context"
	"github.com/gorgonia-parallel/gp/train"
	"math"
	"path/filepath"
	"testing"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// rankState is what one in-process rank needs to keep training.
type rankState struct {
	e *Engine
	p *Program
	m *nn.Model
}

// startRanks builds world in-process ZeRO ranks (seeded differently: New broadcasts).
func startRanks(t *testing.T, world, per int, bn bool, opts ...Option) ([]rankState, []comm.Group) {
	t.Helper()
	groups := comm.NewLocalGroups(world)
	t.Cleanup(func() { closeAll(groups) })
	rs := make([]rankState, world)
	err := each(world, func(r int) error {
		m, err := nn.NewModel(convNet(bn), nn.WithSeed(int64(7+r)))
		if err != nil {
			return err
		}
		all := append([]Option{WithOptimizer(AdamW(lr)), WithWeightDecay(wd)}, opts...)
		if bn {
			all = append(all, SyncBatchNorm())
		}
		e, err := New(context.Background(), m, groups[r], all...)
		if err != nil {
			return err
		}
		p, err := e.Compile(classify(per))
		rs[r] = rankState{e, p, m}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return rs, groups
}

// steps trains steps [from, to) on the global batch split over the ranks.
func steps(rs []rankState, per, from, to int) error {
	return each(len(rs), func(r int) error {
		for s := from; s < to; s++ {
			rs[r].e.ZeroGrad()
			if err := feed(rs[r].p, s, r*per, (r+1)*per); err != nil {
				return err
			}
			if err := train.RunStep(context.Background(), rs[r].p); err != nil {
				return err
			}
		}
		return nil
	})
}

func gather(rs []rankState) ([]float32, error) {
	out := make([][]float32, len(rs))
	err := each(len(rs), func(r int) error {
		var err error
		out[r], err = rs[r].e.GatherParams(context.Background())
		return err
	})
	return out[0], err
}

// A checkpoint written at world 2 after 3 steps resumes at world 3 (global batch 6 in both)
// with the same next-step parameters (rel ≤ 1e-5: reduction order differs), the resumed
// state is bit-identical before the step, and the consolidated file has torchvision keys,
// loads into a plain model with checkpoint.LoadModel and equals the gathered parameters.
func TestCheckpointReshard(t *testing.T) {
	const global = 6
	dir := t.TempDir()
	for _, bn := range []bool{false, true} {
		two, _ := startRanks(t, 2, global/2, bn)
		if err := steps(two, global/2, 0, 3); err != nil {
			t.Fatal(err)
		}
		saved, err := gather(two)
		if err != nil {
			t.Fatal(err)
		}
		if err := each(2, func(r int) error { return two[r].e.Save(context.Background(), dir, "step3") }); err != nil {
			t.Fatal(err)
		}
		if err := steps(two, global/2, 3, 4); err != nil {
			t.Fatal(err)
		}
		want, err := gather(two)
		if err != nil {
			t.Fatal(err)
		}

		three, _ := startRanks(t, 3, global/3, bn)
		if err := each(3, func(r int) error { return three[r].e.Load(dir) }); err != nil {
			t.Fatal(err)
		}
		loaded, err := gather(three)
		if err != nil {
			t.Fatal(err)
		}
		for i := range saved {
			if math.Float32bits(saved[i]) != math.Float32bits(loaded[i]) {
				t.Fatalf("bn=%v: element %d: resumed %g, saved %g", bn, i, loaded[i], saved[i])
			}
		}
		if err := steps(three, global/3, 3, 4); err != nil {
			t.Fatal(err)
		}
		got, err := gather(three)
		if err != nil {
			t.Fatal(err)
		}
		if r := rel(got, want); !(r <= equivTol) {
			t.Errorf("bn=%v: next step after resharding 2→3: rel %.3g > %g", bn, r, equivTol)
		}
		if r := rel(got, saved); r < 1e-4 {
			t.Errorf("bn=%v: the step after resuming did not move the parameters (rel %.3g)", bn, r)
		}
		for _, b := range two[0].m.Params.Buffers {
			if b.Data != nil && rel(three[1].m.Params.Buffer(b.Name).Data, b.Data) > equivTol {
				t.Errorf("bn=%v: buffer %s differs after resuming", bn, b.Name)
			}
		}

		entries, man, err := Consolidate(dir, true)
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "model.npz")
		if err := checkpoint.Save(out, entries); err != nil {
			t.Fatal(err)
		}
		plain, err := nn.NewModel(convNet(bn))
		if err != nil {
			t.Fatal(err)
		}
		back, err := checkpoint.Load(out)
		if err != nil {
			t.Fatal(err)
		}
		if rep, err := checkpoint.LoadModel(plain.Params, back); err != nil || !rep.OK() {
			t.Fatalf("consolidated file: %v %v", rep, err)
		}
		for i, v := range plain.Params.Data {
			if v != saved[i] {
				t.Fatalf("consolidated element %d = %g, saved %g", i, v, saved[i])
			}
		}
		if man.World != 2 || man.Steps != 3 {
			t.Errorf("manifest world %d steps %d, want 2 and 3", man.World, man.Steps)
		}
		// The consolidated file (whole keys, optimizer included) loads into a sharded engine too.
		one, _ := startRanks(t, 1, global, bn)
		if err := one[0].e.Load(out); err != nil {
			t.Fatal(err)
		}
		if err := steps(one, global, 3, 4); err != nil {
			t.Fatal(err)
		}
		if g1, err := gather(one); err != nil || rel(g1, want) > equivTol {
			t.Errorf("bn=%v: resume at world 1 from the consolidated file: rel %.3g, %v", bn, rel(g1, want), err)
		}
	}
}
