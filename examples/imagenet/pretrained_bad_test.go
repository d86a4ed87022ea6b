package main

import (
	"archive/zip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gorgonia-parallel/gp/nn/checkpoint"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// A -pretrained file whose member starts with the .npy magic and a header npyio panics on
// (no newline: slice bounds out of range [:-1] in its readHeader) ends the run on every rank
// with the error naming the flag, the file and the member, not a panic.
func TestPretrainedCraftedNPZ(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "resnet8-damaged.npz")
	f, err := os.Create(bad)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	w, err := zw.CreateHeader(&zip.FileHeader{Name: "conv1.weight.npy", Method: zip.Store})
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("\x93NUMPY\x01\x00\x04\x00{'de"))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()

	cfg := tinyConfig(t, t.TempDir())
	cfg.Arch, cfg.MaxSteps, cfg.Resume, cfg.Pretrained = "resnet8", 1, "none", bad
	const world = 2
	groups := comm.NewLocalGroups(world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cfg
			c.Group = groups[r]
			_, errs[r] = Run(context.Background(), c, io.Discard)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err == nil || !errors.Is(err, checkpoint.ErrCorrupt) {
			t.Errorf("rank %d: error %v, want one wrapping checkpoint.ErrCorrupt", r, err)
			continue
		}
		for _, want := range []string{"-pretrained", bad, `key "conv1.weight"`} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("rank %d: error %q does not name %s", r, err, want)
			}
		}
	}
}
