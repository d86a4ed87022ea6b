package data

import "fmt"

// checkLabelRange checks labels (read from the file name) against [0, c.classes), only
// refusing negative ones when classes is 0. Under Fail a bad label is an error naming the file,
// the index and the value, wrapping ErrBadLabel; otherwise the bad samples are logged and left
// out: kept are the remaining labels, idx the source index of each kept sample and skipped the
// source indices left out (idx and skipped are nil when nothing was left out).
func checkLabelRange(name string, labels []int64, c config) (kept []int64, idx, skipped []int, err error) {
	bad := func(y int64) bool { return y < 0 || (c.classes > 0 && y >= int64(c.classes)) }
	want := "want >= 0"
	if c.classes > 0 {
		want = fmt.Sprintf("want 0..%d for %d classes", c.classes-1, c.classes)
	}
	for i, y := range labels {
		if !bad(y) {
			continue
		}
		if c.bad == Fail {
			return nil, nil, nil, fmt.Errorf("%s: label %d at index %d (%s): %w", name, y, i, want, ErrBadLabel)
		}
		skipped = append(skipped, i)
		c.log.Warn("data: skipping sample with a bad label", "path", name, "index", i, "label", y, "want", want)
	}
	if skipped == nil {
		return labels, nil, nil, nil
	}
	kept = labels[:0:0]
	for i, y := range labels {
		if !bad(y) {
			idx, kept = append(idx, i), append(kept, y)
		}
	}
	return kept, idx, skipped, nil
}
