package data_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/fstest"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/data/rgb"
	"github.com/gorgonia-parallel/gp/data/synth"
	"github.com/gorgonia-parallel/gp/data/transforms"
)

func smallPipe(t testing.TB) *transforms.Pipeline {
	p, err := transforms.Compose(transforms.NewRandomResizedCrop(16), transforms.RandomHorizontalFlip{P: 0.5},
		transforms.ToTensor{}, transforms.Normalize{Mean: transforms.ImageNetMean, Std: transforms.ImageNetStd})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func jpegBytes(t testing.TB) []byte {
	var img rgb.Image
	img.Resize(24, 20)
	for i := range img.Pix {
		img.Pix[i] = uint8(i)
	}
	var b bytes.Buffer
	if err := rgb.EncodeJPEG(&b, &img, 90); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestImageFolderOrder: classes sorted, case-insensitive extensions, other files ignored, files
// ordered as sorted(os.walk(...)) orders them ("a-b" before "a/x": '-' < '/').
func TestImageFolderOrder(t *testing.T) {
	j := jpegBytes(t)
	fsys := fstest.MapFS{
		"b/2.JPG":       {Data: j},
		"b/1.png":       {Data: j},
		"b/notes.txt":   {Data: []byte("x")},
		"a/a/x/3.jpeg":  {Data: j},
		"a/a-b/2.webp":  {Data: j},
		"a/a/1.Tiff":    {Data: j},
		"c/0.ppm":       {Data: j},
		"stray.jpg":     {Data: j},
		"c/sub/9.bmp":   {Data: j},
		"c/sub/8.pgm":   {Data: j},
		"c/sub/7.gif":   {Data: j},
		"c/sub/6.jpg.x": {Data: j},
	}
	d, err := data.NewImageFolder("", data.WithFS(fsys), data.WithTransform(smallPipe(t)))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Classes, []string{"a", "b", "c"}) {
		t.Fatalf("classes %v", d.Classes)
	}
	var got []string
	for _, s := range d.Samples {
		got = append(got, s.Path+":"+string(rune('0'+s.Label)))
	}
	want := []string{"a/a/1.Tiff:0", "a/a-b/2.webp:0", "a/a/x/3.jpeg:0", "b/1.png:1", "b/2.JPG:1", "c/0.ppm:2", "c/sub/8.pgm:2", "c/sub/9.bmp:2"}
	if !slices.Equal(got, want) {
		t.Fatalf("samples\n got %v\nwant %v", got, want)
	}
}

func TestImageFolderErrors(t *testing.T) {
	if _, err := data.NewImageFolder("", data.WithFS(fstest.MapFS{"x.jpg": {Data: []byte{1}}})); !errors.Is(err, data.ErrNoClasses) {
		t.Errorf("no class folders: %v, want ErrNoClasses", err)
	}
	if _, err := data.NewImageFolder("", data.WithFS(fstest.MapFS{"a/x.txt": {Data: []byte{1}}})); err == nil {
		t.Error("class without images: want an error")
	}
	if _, err := data.NewImageFolder(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing root: want an error")
	}
	p, _ := transforms.Compose(transforms.Resize{Width: 10})
	if _, err := data.NewImageFolder("", data.WithFS(fstest.MapFS{"a/x.jpg": {Data: []byte{1}}}), data.WithTransform(p)); err == nil {
		t.Error("variable-size transform: want an error")
	}
}

// brokenFS fails to list one folder, as an unreadable directory does.
type brokenFS struct {
	fstest.MapFS
	bad string
}

func (b brokenFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if name == b.bad {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrPermission}
	}
	return b.MapFS.ReadDir(name)
}

// TestUnreadableFolder: Fail names the folder; Skip keeps the class index of every other class.
func TestUnreadableFolder(t *testing.T) {
	j := jpegBytes(t)
	fsys := brokenFS{MapFS: fstest.MapFS{"a/1.jpg": {Data: j}, "b/1.jpg": {Data: j}, "c/1.jpg": {Data: j}}, bad: "b"}
	_, err := data.NewImageFolder("", data.WithFS(fsys), data.WithTransform(smallPipe(t)))
	if !errors.Is(err, fs.ErrPermission) || !bytes.Contains([]byte(err.Error()), []byte("b")) {
		t.Fatalf("Fail policy: %v", err)
	}
	d, err := data.NewImageFolder("", data.WithFS(fsys), data.WithTransform(smallPipe(t)), data.WithBadInput(data.Skip), data.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Samples) != 2 || d.Samples[1].Label != 2 || d.ClassToIdx["c"] != 2 || len(d.Bad) == 0 {
		t.Fatalf("Skip policy: samples %v bad %v", d.Samples, d.Bad)
	}
	// On the real file system too, when permissions apply (not as root).
	if os.Geteuid() != 0 {
		root := t.TempDir()
		if err := synth.WriteImageFolder(root, 2, 1, 16, 1); err != nil {
			t.Fatal(err)
		}
		locked := filepath.Join(root, synth.ClassName(0))
		if err := os.Chmod(locked, 0); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(locked, 0o755)
		if _, err := data.NewImageFolder(root, data.WithTransform(smallPipe(t))); err == nil {
			t.Error("unreadable class folder: want an error")
		}
	}
}

func TestImageFolderLoad(t *testing.T) {
	root := t.TempDir()
	if err := synth.WriteImageFolder(root, 3, 2, 32, 7); err != nil {
		t.Fatal(err)
	}
	d, err := data.NewImageFolder(root, data.WithTransform(transforms.Eval(20, 16)))
	if err != nil {
		t.Fatal(err)
	}
	if c, h, w := d.Shape(); c != 3 || h != 16 || w != 16 || d.Len() != 6 {
		t.Fatalf("shape %d %d %d len %d", c, h, w, d.Len())
	}
	dst := make([]float32, 3*16*16)
	label, err := d.Load(context.Background(), 5, nil, dst)
	if err != nil || label != 2 {
		t.Fatalf("Load(5) = %d, %v", label, err)
	}
}
