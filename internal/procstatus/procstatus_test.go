package procstatus

import (
	"errors"
	"io/fs"
	"runtime"
	"strings"
	"testing"
)

// TestBytes: the resident size is positive, at most the peak, and grows by at least most of
// a buffer the test writes; a field that does not exist is an error naming it.
func TestBytes(t *testing.T) {
	if runtime.GOOS != "linux" {
		if _, err := Bytes("VmRSS"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Bytes on %s: %v, want fs.ErrNotExist", runtime.GOOS, err)
		}
		return
	}
	before, err := Bytes("VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = 1
	}
	after, err := Bytes("VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	peak, err := Bytes("VmHWM")
	if err != nil {
		t.Fatal(err)
	}
	if before <= 0 || after-before < 48<<20 || peak < after {
		t.Errorf("VmRSS %d then %d after writing 64 MiB, VmHWM %d", before, after, peak)
	}
	runtime.KeepAlive(buf)
	if _, err := Bytes("VmNoSuchField"); err == nil || !strings.Contains(err.Error(), "VmNoSuchField") {
		t.Errorf("missing field: %v", err)
	}
}
