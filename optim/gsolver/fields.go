package gsolver

import (
	"fmt"
	"reflect"
	"slices"
	"unsafe"

	G "gorgonia.org/gorgonia"
)

// The one place that reads and writes gorgonia's unexported solver fields. Each is found
// by name and checked by type before use; a layout that differs (another gorgonia version)
// is an error of Of, never a wrong read.

// kind is what gsolver knows of one solver type: its name in keys and which state fields
// it has.
type kind struct {
	name  string
	iter  bool // an int step count "iter" (AdamSolver)
	cache bool // a "cache []*dualValue", one per learnable
}

var kinds = map[reflect.Type]kind{
	reflect.TypeFor[*G.VanillaSolver](): {name: "vanilla"},
	reflect.TypeFor[*G.Momentum]():      {name: "momentum", cache: true},
	reflect.TypeFor[*G.AdamSolver]():    {name: "adam", iter: true, cache: true},
	reflect.TypeFor[*G.RMSPropSolver](): {name: "rmsprop", cache: true},
	reflect.TypeFor[*G.AdaGradSolver](): {name: "adagrad", cache: true},
}

func kindNames() []string {
	var ns []string
	for t := range kinds {
		ns = append(ns, t.String())
	}
	slices.Sort(ns)
	return ns
}

// fields are settable views of one solver's state fields; iter and cache are invalid
// (the zero reflect.Value) for a kind without them.
type fields struct {
	eta, iter, cache reflect.Value
}

var valueType = reflect.TypeFor[G.Value]()

// open finds s's state fields and checks their types.
func open(s G.Solver, k kind) (fields, error) {
	v := reflect.ValueOf(s)
	if v.IsNil() {
		return fields{}, fmt.Errorf("nil solver")
	}
	sv := v.Elem()
	var f fields
	var err error
	if f.eta, err = field(sv, "eta", reflect.TypeFor[float64]()); err != nil {
		return fields{}, err
	}
	if k.iter {
		if f.iter, err = field(sv, "iter", reflect.TypeFor[int]()); err != nil {
			return fields{}, err
		}
	}
	if k.cache {
		c, ok := sv.Type().FieldByName("cache")
		if !ok {
			return fields{}, fmt.Errorf("no field cache")
		}
		if err := checkCache(c.Type); err != nil {
			return fields{}, fmt.Errorf("field cache: %w", err)
		}
		f.cache = writable(sv.FieldByIndex(c.Index))
	}
	return f, nil
}

// field is sv's field name, writable, if it has type want.
func field(sv reflect.Value, name string, want reflect.Type) (reflect.Value, error) {
	sf, ok := sv.Type().FieldByName(name)
	if !ok {
		return reflect.Value{}, fmt.Errorf("no field %s", name)
	}
	if sf.Type != want {
		return reflect.Value{}, fmt.Errorf("field %s is %v, want %v", name, sf.Type, want)
	}
	return writable(sv.FieldByIndex(sf.Index)), nil
}

// checkCache checks that t is []*dualValue with dualValue {Value (embedded); d Value}.
func checkCache(t reflect.Type) error {
	if t.Kind() != reflect.Slice || t.Elem().Kind() != reflect.Pointer || t.Elem().Elem().Kind() != reflect.Struct {
		return fmt.Errorf("type %v, want a slice of pointers to gorgonia's dualValue", t)
	}
	dv := t.Elem().Elem()
	if dv.Name() != "dualValue" || dv.NumField() != 2 {
		return fmt.Errorf("element %v, want gorgonia's dualValue of 2 fields", dv)
	}
	if f := dv.Field(0); f.Name != "Value" || !f.Anonymous || f.Type != valueType {
		return fmt.Errorf("dualValue's first field %s %v, want the embedded gorgonia.Value", f.Name, f.Type)
	}
	if f := dv.Field(1); f.Name != "d" || f.Type != valueType {
		return fmt.Errorf("dualValue's second field %s %v, want d gorgonia.Value", f.Name, f.Type)
	}
	return nil
}

// writable is v (addressable) without reflect's read-only mark for unexported fields.
func writable(v reflect.Value) reflect.Value {
	return reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem()
}

// cacheAt is entry i of a cache checked by checkCache: its value and derivative, false
// when the entry is nil.
func cacheAt(cache reflect.Value, i int) (value, d G.Value, ok bool) {
	p := cache.Index(i)
	if p.IsNil() {
		return nil, nil, false
	}
	dv := p.Elem()
	value, _ = writable(dv.Field(0)).Interface().(G.Value)
	d, _ = writable(dv.Field(1)).Interface().(G.Value)
	return value, d, true
}

// newDual is a new *dualValue (ptrType) holding value and d.
func newDual(ptrType reflect.Type, value, d G.Value) reflect.Value {
	p := reflect.New(ptrType.Elem())
	writable(p.Elem().Field(0)).Set(reflect.ValueOf(&value).Elem())
	writable(p.Elem().Field(1)).Set(reflect.ValueOf(&d).Elem())
	return p
}
