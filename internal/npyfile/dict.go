package npyfile

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// maxDims bounds the number of dimensions (numpy's NPY_MAXDIMS is 64).
const maxDims = 64

// maxStringItem bounds the item size of S and U dtypes (bytes).
const maxStringItem = 1 << 20

// parseDict parses the header dictionary, a Python literal such as
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }, followed by spaces and a
// newline, and fills Descr, Fortran, Shape, ItemSize and Elems.
func (h *Header) parseDict(b []byte) error {
	p := &dictParser{b: b}
	p.space()
	if !p.eat('{') {
		return errors.New("does not start with '{'")
	}
	seen := map[string]bool{}
	for {
		p.space()
		if p.eat('}') {
			break
		}
		key, err := p.str()
		if err != nil {
			return fmt.Errorf("key: %w", err)
		}
		if seen[key] {
			return fmt.Errorf("key %q appears twice", key)
		}
		seen[key] = true
		p.space()
		if !p.eat(':') {
			return fmt.Errorf("no ':' after key %q", key)
		}
		p.space()
		switch key {
		case "descr":
			if p.peek() == '[' {
				return errors.New("structured dtypes are not supported")
			}
			if h.Descr, err = p.str(); err != nil {
				return fmt.Errorf("descr: %w", err)
			}
		case "fortran_order":
			switch {
			case p.word("True"):
				h.Fortran = true
			case p.word("False"):
				h.Fortran = false
			default:
				return errors.New("fortran_order is neither True nor False")
			}
		case "shape":
			if h.Shape, err = p.tuple(); err != nil {
				return fmt.Errorf("shape: %w", err)
			}
		default:
			return fmt.Errorf("unknown key %q (want descr, fortran_order, shape)", key)
		}
		p.space()
		if p.eat(',') {
			continue
		}
		p.space()
		if !p.eat('}') {
			return fmt.Errorf("no ',' or '}' after %s", key)
		}
		break
	}
	for _, k := range []string{"descr", "fortran_order", "shape"} {
		if !seen[k] {
			return fmt.Errorf("no %q key", k)
		}
	}
	p.space()
	if p.i != len(p.b) {
		return fmt.Errorf("%d unexpected bytes after the dictionary", len(p.b)-p.i)
	}
	size, err := itemSize(h.Descr)
	if err != nil {
		return err
	}
	h.ItemSize = size
	h.Elems = 1
	for _, d := range h.Shape {
		if d != 0 && h.Elems > math.MaxInt64/int64(size)/int64(d) {
			return fmt.Errorf("shape %v of %s overflows 2^63 bytes", h.Shape, h.Descr)
		}
		h.Elems *= int64(d)
	}
	return nil
}

// itemSize checks a simple dtype string (byte order, kind, size: "<f4", "|u1", "<U8") and
// returns the bytes per element. Object, structured, datetime and void dtypes are refused.
func itemSize(d string) (int, error) {
	s := d
	if len(s) > 0 && (s[0] == '<' || s[0] == '>' || s[0] == '|' || s[0] == '=') {
		s = s[1:]
	}
	if len(s) < 2 {
		return 0, fmt.Errorf("dtype %q is not a simple numpy dtype", d)
	}
	n, err := strconv.Atoi(s[1:])
	if err != nil || n <= 0 || s[1] == '+' || s[1] == '0' {
		return 0, fmt.Errorf("dtype %q has no valid item size", d)
	}
	ok := false
	switch s[0] {
	case 'b':
		ok = n == 1
	case 'i', 'u':
		ok = n == 1 || n == 2 || n == 4 || n == 8
	case 'f':
		ok = n == 2 || n == 4 || n == 8
	case 'c':
		ok = n == 8 || n == 16
	case 'S':
		ok = n <= maxStringItem
	case 'U':
		ok = n <= maxStringItem/4
		n *= 4
	}
	if !ok {
		return 0, fmt.Errorf("dtype %q is not supported (want b1, i/u 1-8, f2/f4/f8, c8/c16, S or U)", d)
	}
	return n, nil
}

type dictParser struct {
	b []byte
	i int
}

func (p *dictParser) peek() byte {
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

func (p *dictParser) eat(c byte) bool {
	if p.peek() == c && p.i < len(p.b) {
		p.i++
		return true
	}
	return false
}

func (p *dictParser) space() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\n' || p.b[p.i] == '\t' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *dictParser) word(w string) bool {
	if len(p.b)-p.i >= len(w) && string(p.b[p.i:p.i+len(w)]) == w {
		p.i += len(w)
		return true
	}
	return false
}

// str parses a quoted string without escapes (numpy's keys and dtypes never need them).
func (p *dictParser) str() (string, error) {
	q := p.peek()
	if q != '\'' && q != '"' {
		return "", errors.New("not a quoted string")
	}
	p.i++
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == q {
			s := string(p.b[start:p.i])
			p.i++
			return s, nil
		}
		if c == '\\' || c < ' ' || c > '~' {
			return "", fmt.Errorf("byte %#x inside a string", c)
		}
		p.i++
	}
	return "", errors.New("unterminated string")
}

// tuple parses "()", "(3,)" or "(2, 3)" (Python 2's "3L" accepted, and "(3)", which
// numpy would refuse but some writers produce, read as "(3,)").
func (p *dictParser) tuple() ([]int, error) {
	if !p.eat('(') {
		return nil, errors.New("not a tuple")
	}
	dims := []int{}
	for {
		p.space()
		if p.eat(')') {
			return dims, nil
		}
		start := p.i
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
		}
		d, err := strconv.Atoi(string(p.b[start:p.i]))
		if p.i == start || err != nil {
			return nil, fmt.Errorf("dimension %d is not a non-negative integer below 2^63", len(dims))
		}
		p.eat('L')
		if len(dims) == maxDims {
			return nil, fmt.Errorf("more than %d dimensions", maxDims)
		}
		dims = append(dims, d)
		p.space()
		if p.eat(',') {
			continue
		}
		p.space()
		if !p.eat(')') {
			return nil, errors.New("no ',' or ')' after a dimension")
		}
		return dims, nil
	}
}
