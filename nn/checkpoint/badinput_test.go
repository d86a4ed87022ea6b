package checkpoint

import (
	"archive/zip"
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/npyfile"
	"github.com/gorgonia-parallel/gp/nn"
)

// craftedNPZ is an .npz whose member "layer.weight.npy" starts with the .npy magic and a
// header npyio v0.14.0 panics on (slice bounds out of range [:-1] in npy.(*Reader).readHeader,
// reader.go:101: the header has no newline), after a well-formed member.
func craftedNPZ(t testing.TB) []byte {
	var buf bytes.Buffer
	if err := Write(&buf, []nn.StateEntry{{Name: "fc.bias", Shape: []int{2}, F32: []float32{1, 2}}}); err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	zw := zip.NewWriter(&out)
	if err := zw.Copy(zr.File[0]); err != nil {
		t.Fatal(err)
	}
	w, err := zw.CreateHeader(&zip.FileHeader{Name: "layer.weight.npy", Method: zip.Store})
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("\x93NUMPY\x01\x00\x04\x00{'de"))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func TestReadCraftedNPZ(t *testing.T) {
	b := craftedNPZ(t)
	_, err := Read(bytes.NewReader(b), int64(len(b)), "weights/resnet18.npz")
	if err == nil || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("error %v, want ErrCorrupt", err)
	}
	for _, want := range []string{"weights/resnet18.npz", `key "layer.weight"`, "header"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

func TestReadRefusesHugeClaims(t *testing.T) {
	for _, tc := range []struct {
		name, member, want string
	}{
		// 2^60 float32s claimed by a 128-byte member: refused from the header, nothing allocated.
		{"2^60 elements", string(npyfile.Encode("<f4", false, []int{1 << 30, 1 << 30})), "needs 4611686018427387904 data bytes"},
		{"structured", "\x93NUMPY\x01\x00\x41\x00{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (), }\n\x00\x00\x00\x00", "structured"},
		{"big-endian", string(npyfile.Encode(">f4", false, []int{1})) + "\x00\x00\x00\x00", "dtype >f4 not supported"},
		{"fortran", string(npyfile.Encode("<f4", true, []int{1})) + "\x00\x00\x00\x00", "Fortran"},
	} {
		var out bytes.Buffer
		zw := zip.NewWriter(&out)
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: "w.npy", Method: zip.Store})
		w.Write([]byte(tc.member))
		zw.Close()
		_, err := Read(bytes.NewReader(out.Bytes()), int64(out.Len()), "x.npz")
		if err == nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), `x.npz: key "w"`) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want ErrCorrupt naming x.npz, key w and %q", tc.name, err, tc.want)
		}
	}
}

// FuzzRead checks that Read turns any bytes into entries or an error wrapping ErrCorrupt,
// never a panic, and that entries it returns write and read back equal.
func FuzzRead(f *testing.F) {
	var buf bytes.Buffer
	if err := Write(&buf, []nn.StateEntry{
		{Name: "conv1.weight", Shape: []int{2, 1, 2, 2}, F32: []float32{1, -2, 3, -4, 5, 6, 7, 8}},
		{Name: "bn1.num_batches_tracked", Shape: []int{}, I64: []int64{7}},
		{Name: "lr", Shape: []int{1}, F64: []float64{0.1}},
	}); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(craftedNPZ(f))
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := Read(bytes.NewReader(in), int64(len(in)), "fuzz.npz")
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "fuzz.npz") {
				t.Fatalf("error %v: want ErrCorrupt naming the file", err)
			}
			return
		}
		var out bytes.Buffer
		if err := Write(&out, got); err != nil {
			return // e.g. two members with one key: readable, not writable
		}
		again, err := Read(bytes.NewReader(out.Bytes()), int64(out.Len()), "again.npz")
		if err != nil {
			t.Fatalf("written back: %v", err)
		}
		if len(again) != len(got) {
			t.Fatalf("%d entries read back as %d", len(got), len(again))
		}
		for i := range got {
			a, b := got[i], again[i]
			if a.Name != b.Name || !slices.Equal(a.Shape, b.Shape) || !slices.Equal(a.I64, b.I64) ||
				!bitsEqual32(a.F32, b.F32) || !bitsEqual64(a.F64, b.F64) {
				t.Fatalf("entry %q changed in a round trip", a.Name)
			}
		}
	})
}

func bitsEqual32(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return x == y || (x != x && y != y) })
}

func bitsEqual64(a, b []float64) bool {
	return slices.EqualFunc(a, b, func(x, y float64) bool { return x == y || (x != x && y != y) })
}
