package guard

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestCall(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   func() error
		is   error
		want []string
	}{
		{"slice bounds", func() error {
			var s []int
			_ = s[:len(s)-1]
			return nil
		}, ErrPanic, []string{"out of range [:-1]", "guard_test.go"}},
		{"panic value", func() error { panic("impossible") }, ErrPanic, []string{"impossible", "guard_test.go"}},
		{"plain error", func() error { return io.ErrUnexpectedEOF }, io.ErrUnexpectedEOF, []string{"unexpected EOF"}},
	} {
		err := Call(tc.fn)
		if !errors.Is(err, tc.is) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.is)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", tc.name, err, w)
			}
		}
	}
	if err := Call(func() error { return nil }); err != nil {
		t.Errorf("no error: got %v", err)
	}
}
