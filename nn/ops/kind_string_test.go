package ops

import (
	"strconv"
	"strings"
	"testing"
)

// Every kind (KindPermute is the last) has its own name, and a value that is no kind says so.
func TestKindString(t *testing.T) {
	seen := map[string]Kind{}
	for k := KindLinear; k <= KindPermute; k++ {
		s := k.String()
		if strings.HasPrefix(s, "Kind(") {
			t.Errorf("kind %d has no name", int(k))
		}
		if o, dup := seen[s]; dup {
			t.Errorf("kinds %d and %d are both %q", int(o), int(k), s)
		}
		seen[s] = k
	}
	for _, c := range []struct {
		k    Kind
		want string
	}{{KindConv2dGradX, "Conv2dGradX"}, {KindPermute, "Permute"}, {0, "Kind(0)"}, {KindPermute + 1, "Kind(" + strconv.Itoa(int(KindPermute+1)) + ")"}} {
		if got := c.k.String(); got != c.want {
			t.Errorf("Kind(%d).String() = %q, want %q", int(c.k), got, c.want)
		}
	}
}
