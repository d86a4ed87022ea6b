package data_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/data"
)

// TestLabelChecks: labels are checked against the class count when a data set opens, on
// real files: the error names the file, the index and the value; Skip and SkipBadLabels
// leave exactly the bad samples out.
func TestLabelChecks(t *testing.T) {
	dir := t.TempDir()
	const n, h, w, c = 4, 2, 2, 3
	images := filepath.Join(dir, "images.npy")
	os.WriteFile(images, npyBytes("|u1", []int{n, h, w, c}, make([]byte, n*h*w*c)), 0o644)
	for _, tc := range []struct {
		name    string
		labels  []int64
		classes int
		bad     data.BadInput
		want    string // a part of the error; "" for none
		kept    []int64
	}{
		{"in range", []int64{0, 1, 2, 1}, 3, data.Fail, "", []int64{0, 1, 2, 1}},
		{"a million", []int64{0, 1_000_000, 2, 1}, 10, data.Fail, "label 1000000 at index 1 (want 0..9 for 10 classes)", nil},
		{"minus one without a class count", []int64{0, 1, -1, 1}, 0, data.Fail, "label -1 at index 2 (want >= 0)", nil},
		{"class count equal to a label", []int64{0, 3, 2, 1}, 3, data.Fail, "label 3 at index 1", nil},
		{"skipped", []int64{0, 1_000_000, -1, 1}, 10, data.Skip, "", []int64{0, 1}},
		{"skipped at open", []int64{7, 1, 2, 1}, 5, data.SkipBadLabels, "", []int64{1, 2, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			labels := filepath.Join(t.TempDir(), "labels.npy")
			writeNPY(t, labels, tc.labels)
			d, err := data.NewArrayDataset(images, labels, data.NHWC, data.WithClasses(tc.classes), data.WithBadInput(tc.bad))
			if tc.want != "" {
				if err == nil || !errors.Is(err, data.ErrBadLabel) || !strings.Contains(err.Error(), labels) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v: want ErrBadLabel naming %s and %q", err, labels, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if d.Len() != len(tc.kept) || !slices.Equal(d.Labels(), tc.kept) {
				t.Fatalf("Len %d labels %v, want %v", d.Len(), d.Labels(), tc.kept)
			}
			for i, want := range tc.kept {
				dst := make([]float32, c*h*w)
				if y, err := d.Load(t.Context(), i, nil, dst); err != nil || y != want {
					t.Fatalf("sample %d: label %d, %v; want %d", i, y, err, want)
				}
			}
		})
	}
}

// TestImageFolderClasses: more class folders than classes fail naming the first folder out
// of range, or under Skip leave its samples out.
func TestImageFolderClasses(t *testing.T) {
	root := t.TempDir()
	j := jpegBytes(t)
	for _, cls := range []string{"ant", "bee", "cat"} {
		os.MkdirAll(filepath.Join(root, cls), 0o755)
		for _, f := range []string{"1.jpg", "2.jpg"} {
			os.WriteFile(filepath.Join(root, cls, f), j, 0o644)
		}
	}
	for _, tc := range []struct {
		name    string
		classes int
		bad     data.BadInput
		want    string
		samples int
	}{
		{"enough classes", 3, data.Fail, "", 6},
		{"no class count", 0, data.Fail, "", 6},
		{"more classes than folders", 1000, data.Fail, "", 6},
		{"too few classes", 2, data.Fail, filepath.Join(root, "cat") + " has label 2 (want 0..1)", 0},
		{"too few classes, skipped", 2, data.SkipBadLabels, "", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := data.NewImageFolder(root, data.WithTransform(smallPipe(t)), data.WithClasses(tc.classes), data.WithBadInput(tc.bad))
			if tc.want != "" {
				if !errors.Is(err, data.ErrBadLabel) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v: want ErrBadLabel with %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Len() != tc.samples {
				t.Fatalf("%d samples, want %d (bad %v)", d.Len(), tc.samples, d.Bad)
			}
			for _, s := range d.Samples {
				if tc.classes > 0 && s.Label >= int64(tc.classes) {
					t.Fatalf("sample %s with label %d kept", s.Path, s.Label)
				}
			}
		})
	}
}
