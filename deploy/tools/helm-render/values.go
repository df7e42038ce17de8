package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/ghodss/yaml"
	"github.com/xeipuuv/gojsonschema"
)

// parseValues reads a values document the way Helm does (sigs.k8s.io/yaml,
// i.e. YAML -> JSON -> Go), so numbers become float64 exactly as in Helm
// (which is why a large integer in values.yaml renders as 1e+06 there too).
func parseValues(data []byte) (map[string]interface{}, error) {
	v := map[string]interface{}{}
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	if v == nil {
		v = map[string]interface{}{}
	}
	return v, nil
}

// buildValues computes .Values like `helm template`:
//  1. the --values files are merged in order with mergeMaps (later wins,
//     maps merge recursively, an explicit null is kept for now);
//  2. the --set strings are applied on top (strvals);
//  3. the result is coalesced over the chart's values.yaml, where a null
//     user value deletes the chart default;
//  4. the result is validated against values.schema.json if present.
func buildValues(ch *Chart, valueFiles, sets []string) (map[string]interface{}, error) {
	user := map[string]interface{}{}
	for _, f := range valueFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		cur, err := parseValues(data)
		if err != nil {
			return nil, fmt.Errorf("failed to parse %s: %v", f, err)
		}
		user = mergeMaps(user, cur)
	}
	for _, s := range sets {
		if err := parseSetInto(s, user); err != nil {
			return nil, fmt.Errorf("failed parsing --set data: %v", err)
		}
	}
	vals := coalesce(user, deepCopy(ch.Values).(map[string]interface{}))
	if ch.Schema != nil {
		if err := validateSchema(ch.Metadata.Name, ch.Schema, vals); err != nil {
			return nil, err
		}
	}
	return vals, nil
}

// mergeMaps is Helm's cli/values mergeMaps: b over a, recursing into maps.
func mergeMaps(a, b map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if vm, ok := v.(map[string]interface{}); ok {
			if om, ok := out[k].(map[string]interface{}); ok {
				out[k] = mergeMaps(om, vm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// coalesce is Helm's chartutil.coalesceTables: defaults fill what the user
// did not set, a user null removes the key, maps recurse, and a user scalar
// is never replaced by a default table (Helm only warns about that). User
// nulls with no default are dropped as well, so they never render as "null".
func coalesce(dst, src map[string]interface{}) map[string]interface{} {
	for key, val := range src {
		dv, ok := dst[key]
		switch {
		case ok && dv == nil:
			delete(dst, key)
		case !ok:
			dst[key] = val
		default:
			sm, sIsMap := val.(map[string]interface{})
			dm, dIsMap := dv.(map[string]interface{})
			if sIsMap && dIsMap {
				dst[key] = coalesce(dm, sm)
			}
		}
	}
	for key, v := range dst {
		if v == nil {
			delete(dst, key)
		}
	}
	return dst
}

// deepCopy copies the chart defaults so coalescing never aliases them.
func deepCopy(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		m := make(map[string]interface{}, len(t))
		for k, x := range t {
			m[k] = deepCopy(x)
		}
		return m
	case []interface{}:
		l := make([]interface{}, len(t))
		for i, x := range t {
			l[i] = deepCopy(x)
		}
		return l
	default:
		return v
	}
}

// validateSchema checks the final values against values.schema.json with
// gojsonschema (the library Helm 3 used before 3.18) and reports the
// failures in Helm's format.
func validateSchema(chartName string, schema []byte, vals map[string]interface{}) error {
	doc, err := json.Marshal(vals)
	if err != nil {
		return err
	}
	res, err := gojsonschema.Validate(gojsonschema.NewBytesLoader(schema), gojsonschema.NewBytesLoader(doc))
	if err != nil {
		return fmt.Errorf("cannot use values.schema.json of chart %s: %v", chartName, err)
	}
	if res.Valid() {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "values don't meet the specifications of the schema(s) in the following chart(s):\n%s:\n", chartName)
	for _, e := range res.Errors() {
		fmt.Fprintf(&b, "- %s\n", e)
	}
	return fmt.Errorf("%s", strings.TrimSuffix(b.String(), "\n"))
}
