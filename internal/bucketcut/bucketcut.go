// Package bucketcut is the rule that cuts gradients into buckets for reduction: by size as
// PyTorch's DDP does, by arrival order once a step has been seen, and a small last bucket
// for the gradients that arrive last. It knows only sizes in bytes and buffer positions.
//
// A cut i means a bucket starts at the i-th gradient (in buffer order); the cuts are
// increasing, none is 0 or len(sizes), and no cuts means one bucket.
package bucketcut

// BySize cuts gradients of sizes bytes, in buffer order, into buckets by size as PyTorch
// does: gradients are added to the current bucket until it holds at least limit bytes (first
// for the first bucket, then capBytes); then the tail gets a bucket of about last bytes (0:
// no tail bucket).
func BySize(sizes []int, first, capBytes, last int) (cuts []int) {
	defer func() { cuts = tail(sizes, nil, cuts, last) }()
	bytes, limit := 0, first
	for i, n := range sizes {
		bytes += n
		if bytes >= limit && i+1 < len(sizes) {
			cuts = append(cuts, i+1)
			bytes, limit = 0, capBytes
		}
	}
	return cuts
}

// ByArrival re-cuts gradients of sizes bytes (in buffer order) from the order they arrived
// in (arrived lists buffer positions, first arrival first; a repeated position counts at its
// first arrival, one out of range is ignored, and positions never seen count as arriving
// last, in buffer order). A bucket is closed once it holds at least its limit (first, then
// capBytes) and the cut falls on a closure point (every gradient before it arrived before
// every gradient after it); without a closure point within twice the limit it is cut by
// size alone. The tail is cut as BySize's, in arrival order. DDP rebuilds its buckets with
// it after the first step.
func ByArrival(sizes []int, arrived []int, first, capBytes, last int) (cuts []int) {
	n := len(sizes)
	rank := make([]int, n)
	for i := range rank {
		rank[i] = -1
	}
	next := 0
	for _, pos := range arrived {
		if pos >= 0 && pos < n && rank[pos] < 0 {
			rank[pos] = next
			next++
		}
	}
	for i := range rank {
		if rank[i] < 0 {
			rank[i] = next
			next++
		}
	}
	defer func() { cuts = tail(sizes, rank, cuts, last) }()
	bytes, limit, prefixMax := 0, first, -1
	for i, size := range sizes {
		bytes += size
		prefixMax = max(prefixMax, rank[i])
		if i+1 >= n || bytes < limit {
			continue
		}
		if prefixMax == i || bytes >= 2*limit {
			cuts = append(cuts, i+1)
			bytes, limit = 0, capBytes
		}
	}
	return cuts
}

// tail adds a cut that gives the gradients arriving last a bucket of about last bytes
// (DDP's LastBucketBytes); sizes are the gradients' bytes in buffer order, rank each buffer
// position's arrival rank (nil: buffer order). The cut is the first position from the end at
// which at least last bytes are collected and the suffix arrived after the prefix, or where
// 2·last bytes are collected; it is added only when it falls after the last cut, so that it
// splits the last bucket.
func tail(sizes []int, rank []int, cuts []int, last int) []int {
	n := len(sizes)
	if last <= 0 || n < 2 {
		return cuts
	}
	r := func(i int) int {
		if rank == nil {
			return i
		}
		return rank[i]
	}
	prefixMax := make([]int, n) // prefixMax[i]: latest arrival among sizes[:i]
	m := -1
	for i := range n {
		prefixMax[i] = m
		m = max(m, r(i))
	}
	lastCut := 0
	if len(cuts) > 0 {
		lastCut = cuts[len(cuts)-1]
	}
	bytes, suffixMin := 0, n
	for i := n - 1; i > lastCut; i-- {
		bytes += sizes[i]
		suffixMin = min(suffixMin, r(i))
		if bytes >= last && (prefixMax[i] < suffixMin || bytes >= 2*last) {
			return append(cuts, i)
		}
	}
	return cuts
}
