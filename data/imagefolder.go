package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/gorgonia-parallel/gp/data/transforms"
)

// Extensions are torchvision's IMG_EXTENSIONS, matched case-insensitively.
var Extensions = []string{".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"}

// Sample is one file of an ImageFolder and its class index.
type Sample struct {
	Path  string
	Label int64
}

// ImageFolder is torchvision.datasets.ImageFolder: root/<class>/**/<file>, classes sorted by name
// and numbered in that order, files in sorted order of (folder path, file name).
type ImageFolder struct {
	Root       string
	Classes    []string
	ClassToIdx map[string]int
	Samples    []Sample
	// Bad lists the folders and files skipped while scanning (Skip policy).
	Bad []string

	fsys  fs.FS
	pipe  *transforms.Pipeline
	w, h  int
	pool  sync.Pool
	osDir bool
}

type folderScratch struct {
	buf []byte
	tr  transforms.Scratch
}

// NewImageFolder scans root. Options: WithTransform, WithFS, WithBadInput, WithLogger,
// WithExtensions, WithClasses. A root without class folders is ErrNoClasses; an unreadable
// folder or a class without images fails, or with Skip is logged and listed in Bad (the class
// keeps its index). With WithClasses(n), more than n class folders fail with ErrBadLabel
// naming the first folder whose label is out of range, or with Skip the samples of those
// folders are left out and the folders listed in Bad.
func NewImageFolder(root string, opts ...Option) (*ImageFolder, error) {
	c := newConfig(opts)
	d := &ImageFolder{Root: root, fsys: c.fsys, pipe: c.transform, ClassToIdx: map[string]int{}}
	if d.fsys == nil {
		d.fsys, d.osDir = os.DirFS(root), true
		root = "."
	}
	if root == "" {
		root = "."
	}
	if d.pipe == nil {
		d.pipe = transforms.Eval(256, 224)
	}
	w, h, ok := d.pipe.OutSize()
	if !ok {
		return nil, fmt.Errorf("image folder %s: the transform's output size depends on the image; end it with a crop", d.Root)
	}
	d.w, d.h = w, h
	exts := c.extensions
	if exts == nil {
		exts = Extensions
	}
	entries, err := fs.ReadDir(d.fsys, root)
	if err != nil {
		return nil, fmt.Errorf("image folder %s: %w", d.Root, err)
	}
	for _, e := range entries {
		if isDir(d.fsys, path.Join(root, e.Name()), e) {
			d.Classes = append(d.Classes, e.Name())
		}
	}
	sort.Strings(d.Classes)
	if len(d.Classes) == 0 {
		return nil, fmt.Errorf("image folder %s: %w", d.Root, ErrNoClasses)
	}
	bad := func(p string, err error) error {
		if c.bad == Fail {
			return fmt.Errorf("image folder %s: %w", p, err)
		}
		d.Bad = append(d.Bad, p)
		c.log.Warn("data: skipping unreadable input", "path", p, "err", err)
		return nil
	}
	for i, cls := range d.Classes {
		d.ClassToIdx[cls] = i
		n := len(d.Samples)
		if err := d.scanClass(path.Join(root, cls), int64(i), exts, bad); err != nil {
			return nil, err
		}
		if len(d.Samples) == n {
			if err := bad(d.display(path.Join(root, cls)), fmt.Errorf("class %q has no file with extension %s", cls, strings.Join(exts, ", "))); err != nil {
				return nil, err
			}
		}
	}
	if c.classes > 0 && len(d.Classes) > c.classes {
		if err := d.dropClasses(c, root); err != nil {
			return nil, err
		}
	}
	d.pool.New = func() any { return &folderScratch{} }
	return d, nil
}

// dropClasses handles class folders beyond c.classes: an error naming the first, or under
// Skip their samples left out (the same on every rank: every rank scans the same folders).
func (d *ImageFolder) dropClasses(c config, root string) error {
	n := c.classes
	if c.bad == Fail {
		return fmt.Errorf("image folder %s: %d class folders for %d classes: folder %s has label %d (want 0..%d): %w",
			d.Root, len(d.Classes), n, d.display(path.Join(root, d.Classes[n])), n, n-1, ErrBadLabel)
	}
	for i, cls := range d.Classes[n:] {
		p := d.display(path.Join(root, cls))
		d.Bad = append(d.Bad, p)
		c.log.Warn("data: skipping a class folder beyond the class count", "path", p, "label", n+i, "classes", n)
	}
	kept := d.Samples[:0]
	for _, s := range d.Samples {
		if s.Label < int64(n) {
			kept = append(kept, s)
		}
	}
	d.Samples = kept
	return nil
}

// scanClass lists a class folder the way torchvision's make_dataset does: sorted(os.walk(dir,
// followlinks=True)) then sorted file names, i.e. ordered by the full folder path string.
func (d *ImageFolder) scanClass(dir string, label int64, exts []string, bad func(string, error) error) error {
	files := map[string][]string{}
	var dirs []string
	var walk func(string, int) error
	walk = func(p string, depth int) error {
		entries, err := fs.ReadDir(d.fsys, p)
		if err != nil {
			return bad(d.display(p), err)
		}
		dirs = append(dirs, p)
		for _, e := range entries {
			full := path.Join(p, e.Name())
			if isDir(d.fsys, full, e) {
				if depth < 64 {
					if err := walk(full, depth+1); err != nil {
						return err
					}
				}
				continue
			}
			if hasExt(e.Name(), exts) {
				files[p] = append(files[p], e.Name())
			}
		}
		return nil
	}
	if err := walk(dir, 0); err != nil {
		return err
	}
	sort.Strings(dirs)
	for _, p := range dirs {
		names := files[p]
		sort.Strings(names)
		for _, n := range names {
			d.Samples = append(d.Samples, Sample{Path: path.Join(p, n), Label: label})
		}
	}
	return nil
}

func isDir(fsys fs.FS, p string, e fs.DirEntry) bool {
	if e.IsDir() {
		return true
	}
	if e.Type()&fs.ModeSymlink != 0 {
		st, err := fs.Stat(fsys, p)
		return err == nil && st.IsDir()
	}
	return false
}

func hasExt(name string, exts []string) bool {
	l := strings.ToLower(name)
	for _, e := range exts {
		if strings.HasSuffix(l, e) {
			return true
		}
	}
	return false
}

// display is a path for messages: on the OS file system, the real path.
func (d *ImageFolder) display(p string) string {
	if d.osDir {
		return filepath.Join(d.Root, filepath.FromSlash(p))
	}
	return p
}

// Len is the number of samples.
func (d *ImageFolder) Len() int { return len(d.Samples) }

// Shape is 3 and the transform's output size.
func (d *ImageFolder) Shape() (c, h, w int) { return 3, d.h, d.w }

// Load reads, decodes and transforms sample i into dst. Errors name the file and wrap
// ErrCorrupt when the file is not a decodable image.
func (d *ImageFolder) Load(ctx context.Context, i int, rng *rand.Rand, dst []float32) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if i < 0 || i >= len(d.Samples) {
		return 0, fmt.Errorf("image folder %s: index %d out of range [0, %d)", d.Root, i, len(d.Samples))
	}
	s := d.Samples[i]
	sc := d.pool.Get().(*folderScratch)
	defer d.pool.Put(sc)
	var err error
	sc.buf, err = readFile(d.fsys, s.Path, sc.buf)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", d.display(s.Path), err)
	}
	if _, _, err := d.pipe.Run(sc.buf, rng, &sc.tr, dst); err != nil {
		return 0, fmt.Errorf("%s: %w", d.display(s.Path), err)
	}
	return s.Label, nil
}

// readFile reads name into buf's memory.
func readFile(fsys fs.FS, name string, buf []byte) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return buf, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return buf, err
	}
	if st.IsDir() {
		return buf, fmt.Errorf("is a directory: %w", ErrCorrupt)
	}
	n := int(st.Size())
	if cap(buf) < n+1 {
		buf = make([]byte, n+1+n/4)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(f, buf); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return buf, fmt.Errorf("file shrank while reading: %w", ErrCorrupt)
		}
		return buf, err
	}
	return buf, nil
}
