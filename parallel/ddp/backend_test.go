package ddp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// probeBackend records what New gives a backend; Accept and Layout fail when told to. Its
// other methods are never reached by New.
type probeBackend struct {
	acceptErr, layoutErr error

	accepted []float32 // the model's parameters when Accept was called
	settings Settings
	layouts  int
}

func (b *probeBackend) Accept(m *nn.Model, s Settings) error {
	b.accepted, b.settings = slices.Clone(m.Params.Data), s
	return b.acceptErr
}

func (b *probeBackend) Layout([]*Bucket) error { b.layouts++; return b.layoutErr }

func (b *probeBackend) Compile(nn.BuildFunc, ...nn.BuildOption) (Executor, error) {
	return nil, errors.New("probe: no programs")
}
func (b *probeBackend) Divide(*nn.Param) error { return nil }
func (b *probeBackend) Launch(context.Context, *Bucket, CommHook) comm.Work {
	return nil
}
func (b *probeBackend) Land(context.Context, *Bucket, comm.Work) error { return nil }
func (b *probeBackend) ZeroGrad() error                                { return nil }
func (b *probeBackend) ReadParams(context.Context) error               { return nil }
func (b *probeBackend) WriteParams(context.Context, func([]float32) error) error {
	return nil
}

// markedHook is a hook of its own identity, to tell WithCommHook's from the default.
type markedHook struct{ CommHook }

// TestWithBackendAcceptedAfterBroadcast: New accepts WithBackend's backend once the ranks
// hold rank 0's parameters (each rank's model starts from another seed), with the DDP's
// model, group, hook and SyncBatchNorm, lays out its buckets, and Backend returns it.
func TestWithBackendAcceptedAfterBroadcast(t *testing.T) {
	const world = 2
	var rank0 []float32
	bes := make([]*probeBackend, world)
	hook := &markedHook{CommHook: AllReduceHook()}
	errs := onRanks(world, func(r int, g comm.Group) error {
		m, err := nn.NewModel(convNet(false), nn.WithSeed(int64(r+1)))
		if err != nil {
			return err
		}
		if r == 0 {
			rank0 = slices.Clone(m.Params.Data)
		}
		bes[r] = &probeBackend{}
		d, err := New(context.Background(), m, g, WithBackend(bes[r]), SyncBatchNorm(), WithCommHook(hook))
		if err != nil {
			return err
		}
		if d.Backend() != Backend(bes[r]) {
			return fmt.Errorf("rank %d: Backend() is %T, not WithBackend's", r, d.Backend())
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r, b := range bes {
		if !slices.Equal(b.accepted, rank0) {
			t.Errorf("rank %d: Accept saw parameters other than rank 0's (accepted before the broadcast)", r)
		}
		if b.settings.Group == nil || b.settings.Group.Rank() != r || !b.settings.SyncBN {
			t.Errorf("rank %d: Accept's settings %+v: want the DDP's group and SyncBN", r, b.settings)
		}
		if b.settings.Hook != hook {
			t.Errorf("rank %d: Accept's hook is %T, want WithCommHook's", r, b.settings.Hook)
		}
		if b.layouts != 1 {
			t.Errorf("rank %d: %d layouts before the first step, want 1", r, b.layouts)
		}
	}
}

// TestWithBackendRefusals: New fails, naming WithBackend and the backend, when the option
// carries no backend or the backend refuses (its Accept or Layout fails).
func TestWithBackendRefusals(t *testing.T) {
	ctx := context.Background()
	single := comm.NewLocalGroups(1)[0]
	defer single.Close(ctx)
	for _, tc := range []struct {
		name string
		be   Backend
		want string
	}{
		{"nil backend", nil, "ddp: rank 0: ddp.WithBackend(nil): give it a backend"},
		{"accept refuses", &probeBackend{acceptErr: errors.New("probe: no SyncBatchNorm here")},
			"ddp: rank 0: ddp.WithBackend(*ddp.probeBackend): probe: no SyncBatchNorm here"},
		{"layout fails", &probeBackend{layoutErr: errors.New("probe: out of events")},
			"ddp: rank 0: *ddp.probeBackend: bucket layout: probe: out of events"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := New(ctx, newModelForRefusal(t), single, WithBackend(tc.be))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v (DDP %v), want an error containing %q", err, d, tc.want)
			}
			t.Log(err)
		})
	}
}
