package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// node is a JSON value that keeps its object keys in file order, so that tables show the
// columns in the order the benchmark wrote them.
type node struct {
	kind   byte // 'o' object, 'a' array, 's' scalar
	keys   []string
	vals   []*node // object values (parallel to keys) or array items
	scalar any     // json.Number, string, bool or nil
}

func (n *node) get(key string) *node {
	if n == nil || n.kind != 'o' {
		return nil
	}
	for i, k := range n.keys {
		if k == key {
			return n.vals[i]
		}
	}
	return nil
}

func (n *node) str() string {
	if n == nil || n.kind != 's' {
		return ""
	}
	if s, ok := n.scalar.(string); ok {
		return s
	}
	return ""
}

func (n *node) num() (float64, bool) {
	if n == nil || n.kind != 's' {
		return 0, false
	}
	switch v := n.scalar.(type) {
	case json.Number:
		f, err := v.Float64()
		return f, err == nil
	case string:
		f, err := strconv.ParseFloat(v, 64)
		return f, err == nil
	}
	return 0, false
}

func parse(r io.Reader) (*node, error) {
	d := json.NewDecoder(r)
	d.UseNumber()
	n, err := parseValue(d)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the first JSON value")
	}
	return n, nil
}

func parseValue(d *json.Decoder) (*node, error) {
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t {
	case json.Delim('{'):
		n := &node{kind: 'o'}
		for d.More() {
			kt, err := d.Token()
			if err != nil {
				return nil, err
			}
			v, err := parseValue(d)
			if err != nil {
				return nil, err
			}
			n.keys = append(n.keys, kt.(string))
			n.vals = append(n.vals, v)
		}
		_, err := d.Token() // '}'
		return n, err
	case json.Delim('['):
		n := &node{kind: 'a'}
		for d.More() {
			v, err := parseValue(d)
			if err != nil {
				return nil, err
			}
			n.vals = append(n.vals, v)
		}
		_, err := d.Token() // ']'
		return n, err
	}
	return &node{kind: 's', scalar: t}, nil
}

// result is one results file and what it records about its circumstances.
type result struct {
	name    string // file name, e.g. ddp.json
	bench   string // the benchmark under bench/ that writes it, e.g. ddp
	command string
	machine string // CPU, cores and OpenBLAS core type
	flags   string
	load    string
	context [][2]string // other recorded circumstances (BLAS, threads, Go version, notes)
	body    *node       // the file without the fields shown above
}

// provenance keys are shown in the section's head (bench: in the index's benchmark column)
// and left out of its tables. generated_at is left out altogether: when a result was measured
// is git's record, not the page's.
var provenance = map[string]bool{"command": true, "machine": true, "load_avg_1m_end": true, "generated_at": true, "bench": true}

// contextKeys are top-level scalars that describe how the run was made.
var contextKeys = []string{"what", "unit", "note", "blas", "blas_threads", "gomaxprocs", "cpus", "parallel", "go", "mpirun", "minimize", "profile"}

func readResult(path string) (*result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	body, err := parse(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w (a results file is one JSON value)", path, err)
	}
	base := filepath.Base(path)
	r := &result{name: base, bench: benchOf(base), body: body}
	r.command = body.get("command").str()
	if r.command == "" {
		r.command = companionCommand(strings.TrimSuffix(path, ".json") + ".txt")
	}
	if m := body.get("machine"); m != nil {
		r.machine = m.get("cpu").str()
		if c, ok := m.get("cores").num(); ok {
			r.machine += fmt.Sprintf(", %d cores", int(c))
		}
		if ct := m.get("openblas_coretype").str(); ct != "" {
			r.machine += ", OPENBLAS_CORETYPE=" + ct
		}
		if fl := m.get("flags"); fl != nil && fl.kind == 'a' {
			var s []string
			for _, v := range fl.vals {
				s = append(s, v.str())
			}
			r.flags = strings.Join(s, " ")
			if r.flags == "" {
				r.flags = "none of avx2, fma, avx512f, avx512bw, avx512_bf16, avx512_fp16"
			}
		}
		if l, ok := m.get("load_avg_1m").num(); ok {
			r.load = fmt.Sprintf("%s (one-minute load average when the run started)", format(l))
			// A long run also records the load when it ended (benchutil.Provenance.End).
			if e, ok := body.get("load_avg_1m_end").num(); ok {
				r.load = fmt.Sprintf("%s when the run started, %s when it ended (one-minute load average)", format(l), format(e))
			}
		}
	}
	if r.load == "" {
		r.load = loadRange(body)
	}
	if body.kind == 'o' {
		for _, k := range contextKeys {
			if v := body.get(k); v != nil && v.kind == 's' {
				r.context = append(r.context, [2]string{k, cell(v)})
			}
		}
		keep := &node{kind: 'o'}
		for i, k := range body.keys {
			if provenance[k] || (body.vals[i].kind == 's' && contains(contextKeys, k)) {
				continue
			}
			keep.keys = append(keep.keys, k)
			keep.vals = append(keep.vals, body.vals[i])
		}
		r.body = keep
	}
	return r, nil
}

// benchOf is the benchmark a results file belongs to: its name up to the first '-' or '.'.
func benchOf(name string) string {
	name = strings.TrimSuffix(name, ".json")
	if i := strings.IndexByte(name, '-'); i > 0 {
		name = name[:i]
	}
	return name
}

// companionCommand is the command on the first line of the table a benchmark writes beside its
// JSON (bench/compress does), without the parenthesised run description's timestamp.
func companionCommand(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if !strings.HasPrefix(line, "go run ") {
		return ""
	}
	cmd, _, _ := strings.Cut(line, "  (")
	return strings.TrimSpace(cmd)
}

// loadRange collects every number under a key that names a load average, anywhere in the
// file, and says their range.
func loadRange(n *node) string {
	lo, hi, count := math.Inf(1), math.Inf(-1), 0
	var keys []string
	var walk func(n *node, loadKey string)
	walk = func(n *node, loadKey string) {
		switch n.kind {
		case 'o':
			for i, k := range n.keys {
				lk := loadKey
				if strings.Contains(k, "load") {
					lk = k
				}
				walk(n.vals[i], lk)
			}
		case 'a':
			for _, v := range n.vals {
				walk(v, loadKey)
			}
		case 's':
			if loadKey == "" {
				return
			}
			if v, ok := n.num(); ok {
				lo, hi, count = math.Min(lo, v), math.Max(hi, v), count+1
				if !contains(keys, loadKey) {
					keys = append(keys, loadKey)
				}
			}
		}
	}
	walk(n, "")
	if count == 0 {
		return ""
	}
	what := "`" + strings.Join(keys, "`, `") + "`"
	if lo == hi {
		return fmt.Sprintf("%s (%s)", format(lo), what)
	}
	return fmt.Sprintf("%s to %s over %d readings (%s)", format(lo), format(hi), count, what)
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// format prints a number with four significant digits, whole numbers from 1000 on as they are.
func format(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case math.Abs(v) >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// cell is a value in one table cell: numbers formatted, short lists inline, objects of
// scalars as key=value pairs, anything deeper left to the file.
func cell(n *node) string {
	if n == nil {
		return ""
	}
	switch n.kind {
	case 's':
		switch v := n.scalar.(type) {
		case json.Number:
			if _, err := strconv.ParseInt(v.String(), 10, 64); err == nil {
				return v.String() // exact, even beyond float64's 53 bits
			}
			f, err := v.Float64()
			if err != nil {
				return v.String()
			}
			return format(f)
		case string:
			return escape(firstLine(v))
		case bool:
			return strconv.FormatBool(v)
		case nil:
			return "–"
		}
	case 'a':
		if len(n.vals) == 0 {
			return "–"
		}
		var s []string
		for _, v := range n.vals {
			if v.kind != 's' {
				return fmt.Sprintf("%d entries (in the file)", len(n.vals))
			}
			s = append(s, cell(v))
		}
		return strings.Join(s, ", ")
	case 'o':
		var s []string
		for i, k := range n.keys {
			if n.vals[i].kind != 's' {
				return fmt.Sprintf("%d fields (in the file)", len(n.keys))
			}
			s = append(s, k+" "+cell(n.vals[i]))
		}
		return strings.Join(s, "; ")
	}
	return ""
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// escape keeps a string inside its table cell.
func escape(s string) string {
	return strings.ReplaceAll(s, "|", "\\|")
}

// tableFolds is the row count from which a table is folded behind a summary line.
const tableFolds = 30

// writeValue writes n: an array of objects as a table, an object's scalars as a two-column
// table and each of its arrays and objects under a heading of its own.
func writeValue(b *bytes.Buffer, n *node, level int, title string) {
	head := func() {
		if title != "" {
			fmt.Fprintf(b, "%s %s\n\n", strings.Repeat("#", level), title)
		}
	}
	switch n.kind {
	case 'a':
		if isTable(n) {
			head()
			writeTable(b, n)
			return
		}
		head()
		fmt.Fprintf(b, "%s\n\n", cell(n))
	case 'o':
		var scalars [][2]string
		for i, k := range n.keys {
			if v := n.vals[i]; v.kind == 's' || (v.kind == 'a' && !isTable(v) && !hasDeep(v)) {
				scalars = append(scalars, [2]string{k, cell(v)})
			}
		}
		head()
		if len(scalars) > 0 {
			b.WriteString("| field | value |\n|---|---|\n")
			for _, kv := range scalars {
				fmt.Fprintf(b, "| `%s` | %s |\n", kv[0], kv[1])
			}
			b.WriteString("\n")
		}
		next := level + 1
		if title == "" {
			next = level
		}
		for i, k := range n.keys {
			v := n.vals[i]
			if v.kind == 's' || (v.kind == 'a' && !isTable(v) && !hasDeep(v)) {
				continue
			}
			if v.kind == 'o' && allObjects(v) {
				writeKeyedTable(b, v, next, pathTitle(title, k))
				continue
			}
			writeValue(b, v, next, pathTitle(title, k))
		}
	case 's':
		head()
		fmt.Fprintf(b, "%s\n\n", cell(n))
	}
}

func pathTitle(parent, key string) string {
	if parent == "" {
		return "`" + key + "`"
	}
	return parent + " › `" + key + "`"
}

func isTable(n *node) bool {
	return n.kind == 'a' && len(n.vals) > 0 && allKind(n.vals, 'o')
}

func allObjects(n *node) bool {
	return n.kind == 'o' && len(n.vals) > 0 && allKind(n.vals, 'o')
}

func allKind(vs []*node, kind byte) bool {
	for _, v := range vs {
		if v.kind != kind {
			return false
		}
	}
	return true
}

func hasDeep(n *node) bool {
	for _, v := range n.vals {
		if v.kind != 's' {
			return true
		}
	}
	return false
}

// writeKeyedTable writes an object of objects as one table, a row per key.
func writeKeyedTable(b *bytes.Buffer, n *node, level int, title string) {
	fmt.Fprintf(b, "%s %s\n\n", strings.Repeat("#", level), title)
	rows := &node{kind: 'a'}
	for i, k := range n.keys {
		row := &node{kind: 'o', keys: append([]string{"name"}, n.vals[i].keys...),
			vals: append([]*node{{kind: 's', scalar: k}}, n.vals[i].vals...)}
		rows.vals = append(rows.vals, row)
	}
	writeTable(b, rows)
}

// writeTable writes an array of objects as a table whose columns are the union of the rows'
// keys in first-seen order.
func writeTable(b *bytes.Buffer, n *node) {
	var cols []string
	for _, row := range n.vals {
		for _, k := range row.keys {
			if !contains(cols, k) {
				cols = append(cols, k)
			}
		}
	}
	if len(n.vals) >= tableFolds {
		fmt.Fprintf(b, "<details><summary>%d rows</summary>\n\n", len(n.vals))
	}
	b.WriteString("| " + strings.Join(cols, " | ") + " |\n|")
	b.WriteString(strings.Repeat("---|", len(cols)) + "\n")
	for _, row := range n.vals {
		cells := make([]string, len(cols))
		for i, c := range cols {
			cells[i] = cell(row.get(c))
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	if len(n.vals) >= tableFolds {
		b.WriteString("\n</details>\n")
	}
	b.WriteString("\n")
}
