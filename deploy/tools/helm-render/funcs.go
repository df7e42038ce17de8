package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	"github.com/ghodss/yaml"
)

// funcMap is Helm's template function map minus the functions that need the
// engine (include, tpl), which engine.go adds per template set:
// sprig's TxtFuncMap without env/expandenv (Helm removes them so charts cannot
// read the renderer's environment), plus Helm's serialisation helpers,
// required, and lookup.
func funcMap() template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	extra := template.FuncMap{
		"toYaml":        toYAML,
		"mustToYaml":    mustToYAML,
		"fromYaml":      fromYAML,
		"fromYamlArray": fromYAMLArray,
		"toJson":        toJSON,
		"mustToJson":    mustToJSON,
		"fromJson":      fromJSON,
		"fromJsonArray": fromJSONArray,
		"required":      required,
		// `helm template` has no cluster, so lookup finds nothing unless
		// --lookup-objects stands in for one (engine.go rebinds it).
		"lookup": lookupIn(nil),
		// Placeholders, replaced by engine.go with closures over the set.
		"include": func(string, interface{}) (string, error) { return "", errors.New("not implemented") },
		"tpl":     func(string, interface{}) (string, error) { return "", errors.New("not implemented") },
	}
	for k, v := range extra {
		f[k] = v
	}
	return f
}

// toYAML is Helm's toYaml: sigs.k8s.io/yaml (JSON tags, sorted keys,
// Kubernetes-style unindented lists) with the trailing newline trimmed so
// `{{ toYaml .x | nindent 4 }}` leaves no blank line. Errors render as "".
func toYAML(v interface{}) string {
	data, err := yaml.Marshal(v)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(data), "\n")
}

func mustToYAML(v interface{}) (string, error) {
	data, err := yaml.Marshal(v)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(string(data), "\n"), nil
}

// fromYAML returns a map; on a parse error Helm returns {"Error": msg}
// instead of failing the render, and so does this.
func fromYAML(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func fromYAMLArray(s string) []interface{} {
	a := []interface{}{}
	if err := yaml.Unmarshal([]byte(s), &a); err != nil {
		a = []interface{}{err.Error()}
	}
	return a
}

func toJSON(v interface{}) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(data)
}

func mustToJSON(v interface{}) (string, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return string(data), nil
}

func fromJSON(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func fromJSONArray(s string) []interface{} {
	a := []interface{}{}
	if err := json.Unmarshal([]byte(s), &a); err != nil {
		a = []interface{}{err.Error()}
	}
	return a
}

// required is Helm's: nil or "" fails the render with the given message.
func required(msg string, val interface{}) (interface{}, error) {
	if val == nil {
		return val, errors.New(msg)
	}
	if s, ok := val.(string); ok && s == "" {
		return val, errors.New(msg)
	}
	return val, nil
}

// lookupIn is Helm's lookup over a fixed set of objects (--lookup-objects):
// the object of that apiVersion, kind, namespace and name, or an empty map;
// with an empty name, a List of every such object in the namespace (all
// namespaces when it is empty), as Helm returns. An object's namespace is
// its metadata.namespace ("" for cluster-scoped objects).
func lookupIn(objects []map[string]interface{}) func(apiVersion, kind, namespace, name string) (map[string]interface{}, error) {
	return func(apiVersion, kind, namespace, name string) (map[string]interface{}, error) {
		var items []interface{}
		for _, o := range objects {
			meta, _ := o["metadata"].(map[string]interface{})
			ons, _ := meta["namespace"].(string)
			oname, _ := meta["name"].(string)
			if o["apiVersion"] != apiVersion || o["kind"] != kind {
				continue
			}
			if name != "" {
				if ons == namespace && oname == name {
					return o, nil
				}
				continue
			}
			if namespace == "" || ons == namespace {
				items = append(items, o)
			}
		}
		if name != "" {
			return map[string]interface{}{}, nil
		}
		if items == nil {
			items = []interface{}{}
		}
		return map[string]interface{}{"apiVersion": apiVersion, "kind": kind + "List", "items": items}, nil
	}
}

// loadObjects reads --lookup-objects: YAML or JSON holding a list of
// objects, a List (an object with "items"), or one object.
func loadObjects(path string) ([]map[string]interface{}, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var v interface{}
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("--lookup-objects %s: %v", path, err)
	}
	if m, ok := v.(map[string]interface{}); ok {
		if items, ok := m["items"].([]interface{}); ok {
			v = items
		} else {
			v = []interface{}{m}
		}
	}
	list, ok := v.([]interface{})
	if !ok {
		return nil, fmt.Errorf("--lookup-objects %s: expected a list of objects, a List or an object", path)
	}
	var out []map[string]interface{}
	for i, x := range list {
		o, ok := x.(map[string]interface{})
		if !ok || o["apiVersion"] == nil || o["kind"] == nil {
			return nil, fmt.Errorf("--lookup-objects %s: item %d is not an object with apiVersion and kind", path, i)
		}
		out = append(out, o)
	}
	return out, nil
}
