package launch

import (
	"bytes"
	"strings"
	"sync"
	"testing"
)

// TestCopyLinesPrefixesWholeLines: every line gets the prefix once; a line redrawn with
// carriage returns (a progress bar) shows as its last redraw, "\r\n" as a plain line end,
// and the file gets the bytes as they came (a last line without its newline gets one).
func TestCopyLinesPrefixesWholeLines(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a\nb\n", "[rank0]: a\n[rank0]: b\n"},
		{"10%\r50%\r100%\ndone\n", "[rank0]: 100%\n[rank0]: done\n"},
		{"crlf\r\n", "[rank0]: crlf\n"},
		{"bar\r\r\n", "[rank0]: bar\n"},
		{"no newline at the end", "[rank0]: no newline at the end\n"},
		{"\n", "[rank0]: \n"},
	} {
		var out, file bytes.Buffer
		var wg sync.WaitGroup
		var mu sync.Mutex
		wg.Add(1)
		copyLines(&wg, &mu, &out, &file, strings.NewReader(tc.in), "[rank0]: ", nil)
		if out.String() != tc.want {
			t.Errorf("%q: console %q, want %q", tc.in, out.String(), tc.want)
		}
		if want := strings.TrimSuffix(tc.in, "\n") + "\n"; file.String() != want {
			t.Errorf("%q: file %q, want the input as it is, ending in a newline", tc.in, file.String())
		}
	}
}
