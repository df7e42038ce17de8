package main

import (
	"fmt"
	"strconv"
	"strings"
)

// This file implements the subset of Helm's pkg/strvals used by --set:
//
//	a.b.c=v            nested keys
//	a=1,b=two          several pairs in one --set
//	list={x,y,z}       a list value
//	list[0].name=v     list index (the list grows with nulls as needed)
//	a\.b=v, a=x\,y     backslash escapes . , = { } [ ] and itself
//
// Values are typed like strvals' typedVal: true/false (any case) -> bool,
// null -> nil (which deletes the key, see coalesce), integers not starting
// with 0 -> int64, everything else (floats included) -> string.

// maxIndex is strvals' limit on list indexes, which guards memory.
const maxIndex = 65536

type step struct {
	key     string
	index   int
	isIndex bool
}

// splitUnescaped splits s at sep outside {...} and not preceded by '\'.
// Escapes are kept; unescape removes them later.
func splitUnescaped(s string, sep byte) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '{':
			depth++
		case '}':
			if depth > 0 {
				depth--
			}
		case sep:
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}

func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func typedVal(s string) interface{} {
	switch {
	case strings.EqualFold(s, "true"):
		return true
	case strings.EqualFold(s, "false"):
		return false
	case strings.EqualFold(s, "null"):
		return nil
	case s == "0":
		return int64(0)
	}
	if s != "" && s[0] != '0' {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i
		}
	}
	return s
}

// parseKey turns "a.b[0].c" into steps.
func parseKey(key string) ([]step, error) {
	var steps []step
	for _, seg := range splitUnescaped(key, '.') {
		name := seg
		var idxs []int
		// Peel trailing [n] groups off the segment.
		for strings.HasSuffix(name, "]") && !strings.HasSuffix(name, "\\]") {
			open := strings.LastIndex(name, "[")
			if open < 0 {
				return nil, fmt.Errorf("key %q has an unmatched ]", key)
			}
			n, err := strconv.Atoi(name[open+1 : len(name)-1])
			if err != nil || n < 0 {
				return nil, fmt.Errorf("key %q has an invalid list index", key)
			}
			if n > maxIndex {
				return nil, fmt.Errorf("index of %d is greater than maximum supported index of %d", n, maxIndex)
			}
			idxs = append([]int{n}, idxs...)
			name = name[:open]
		}
		if name == "" {
			return nil, fmt.Errorf("key %q has an empty name", key)
		}
		steps = append(steps, step{key: unescape(name)})
		for _, n := range idxs {
			steps = append(steps, step{index: n, isIndex: true})
		}
	}
	return steps, nil
}

// setIn stores val at steps below cur, creating maps and lists on the way
// (a scalar in the way is replaced, as strvals does), and returns the new cur.
func setIn(cur interface{}, steps []step, val interface{}) interface{} {
	if len(steps) == 0 {
		return val
	}
	st := steps[0]
	if st.isIndex {
		l, _ := cur.([]interface{})
		for len(l) <= st.index {
			l = append(l, nil)
		}
		l[st.index] = setIn(l[st.index], steps[1:], val)
		return l
	}
	m, ok := cur.(map[string]interface{})
	if !ok {
		m = map[string]interface{}{}
	}
	m[st.key] = setIn(m[st.key], steps[1:], val)
	return m
}

// parseSetInto applies one --set argument to dst.
func parseSetInto(s string, dst map[string]interface{}) error {
	for _, pair := range splitUnescaped(s, ',') {
		if pair == "" {
			continue
		}
		kv := splitUnescaped(pair, '=')
		if len(kv) < 2 {
			return fmt.Errorf("key %q has no value", unescape(pair))
		}
		// Only the first '=' separates; later ones belong to the value.
		key, raw := kv[0], strings.Join(kv[1:], "=")
		steps, err := parseKey(key)
		if err != nil {
			return err
		}
		if steps[0].isIndex {
			return fmt.Errorf("key %q must start with a name", key)
		}
		var val interface{}
		if strings.HasPrefix(raw, "{") && strings.HasSuffix(raw, "}") && !strings.HasSuffix(raw, "\\}") {
			list := []interface{}{}
			if inner := raw[1 : len(raw)-1]; inner != "" {
				for _, item := range splitUnescaped(inner, ',') {
					list = append(list, typedVal(unescape(item)))
				}
			}
			val = list
		} else {
			val = typedVal(unescape(raw))
		}
		setIn(dst, steps, val)
	}
	return nil
}
