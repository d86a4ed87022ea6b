//go:build cgo

package dl

import "testing"

// libc's abs and labs exercise the generic trampoline on functions declared with int and
// long parameters; strerror exercises CallString.
func TestCallLibc(t *testing.T) {
	l, err := Open([]string{"libc.so.6"})
	if err != nil {
		t.Skip(err)
	}
	abs, err := l.Sym("abs")
	if err != nil {
		t.Fatal(err)
	}
	if got := Call(abs, uintptr(^uint64(6))); got != 7 { // abs(-7): int argument, low half of the slot
		t.Fatalf("abs(-7) = %d", got)
	}
	se, err := l.Sym("strerror")
	if err != nil {
		t.Fatal(err)
	}
	if s := CallString(se, 2); s == "" {
		t.Fatal("strerror(2) empty")
	}
	if Call(nil) != -1 {
		t.Fatal("Call(nil) should fail")
	}
}
