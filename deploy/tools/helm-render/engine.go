package main

import (
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
	"text/template"
)

// rendered is the output of one chart render.
type rendered struct {
	// manifests maps template names ("<chart>/templates/x.yaml") to text,
	// for every template that is neither a partial nor NOTES.txt.
	manifests map[string]string
	notes     string
}

// recursionMax bounds include nesting, as Helm does, so a partial that
// includes itself fails instead of overflowing the stack. A variable only so
// the test can lower it (the nested error strings make 1000 levels slow).
var recursionMax = 1000

// parseOrder is Helm's sortTemplates: deeper paths first, and within one
// depth reverse lexical order. Later parses win on duplicate `define`s, so
// this decides which definition of a duplicated partial is used.
func parseOrder(names []string) []string {
	out := append([]string(nil), names...)
	sort.Slice(out, func(i, j int) bool {
		ci, cj := strings.Count(out[i], "/"), strings.Count(out[j], "/")
		if ci != cj {
			return ci > cj
		}
		return out[i] > out[j]
	})
	return out
}

// installEngineFuncs binds include and tpl to the template set t (Helm's
// initFunMap); tpl clones the set and re-binds them on the clone so that
// partials and nested tpl calls resolve inside the clone.
func installEngineFuncs(t *template.Template, included map[string]int) {
	t.Funcs(template.FuncMap{
		"include": func(name string, data interface{}) (string, error) {
			if included[name] > recursionMax {
				return "", fmt.Errorf("rendering template has a nested reference name: %s: unable to execute template", name)
			}
			included[name]++
			defer func() { included[name]-- }()
			var buf strings.Builder
			err := t.ExecuteTemplate(&buf, name, data)
			return buf.String(), err
		},
		"tpl": func(text string, vals interface{}) (string, error) {
			c, err := t.Clone()
			if err != nil {
				return "", err
			}
			c.Option("missingkey=zero")
			installEngineFuncs(c, included)
			// Helm names the tpl template after the calling template, so
			// errors inside it point at the right file.
			name := "tpl"
			if m, ok := vals.(map[string]interface{}); ok {
				if tm, ok := m["Template"].(map[string]interface{}); ok {
					if n, ok := tm["Name"].(string); ok {
						name = n
					}
				}
			}
			c, err = c.New(name).Parse(text)
			if err != nil {
				return "", fmt.Errorf("cannot parse template %q: %v", text, err)
			}
			var buf strings.Builder
			if err := c.Execute(&buf, vals); err != nil {
				return "", fmt.Errorf("error during tpl function execution for %q: %v", text, err)
			}
			return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
		},
	})
}

// renderChart executes every template of the chart with Helm's top-level
// object. All files share one template set, so `define`s are global.
// objects are what `lookup` finds (--lookup-objects; none: helm template).
func renderChart(ch *Chart, vals map[string]interface{}, caps *Capabilities, release, namespace string,
	objects []map[string]interface{}) (res *rendered, err error) {
	// text/template can panic on odd inputs; Helm turns that into an error.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("rendering template failed: %v", r)
		}
	}()
	t := template.New("gotpl")
	// Helm (without --strict): a missing map key yields the zero value,
	// printed as "<no value>", which is then replaced by "" below.
	t.Option("missingkey=zero")
	t.Funcs(funcMap())
	t.Funcs(template.FuncMap{"lookup": lookupIn(objects)})
	included := map[string]int{}
	installEngineFuncs(t, included)

	var names []string
	for _, rel := range ch.sortedTemplates() {
		names = append(names, ch.templateName(rel))
	}
	for _, name := range parseOrder(names) {
		rel := strings.TrimPrefix(name, ch.Metadata.Name+"/")
		if _, err := t.New(name).Parse(ch.Templates[rel]); err != nil {
			return nil, cleanupParseError(err)
		}
	}

	top := map[string]interface{}{
		"Values": vals,
		"Release": map[string]interface{}{
			"Name":      release,
			"Namespace": namespace,
			"Service":   "Helm",
			"IsInstall": true,
			"IsUpgrade": false,
			"Revision":  1,
		},
		"Chart":        ch.Metadata,
		"Capabilities": caps,
		"Files":        ch.Files,
	}
	basePath := path.Join(ch.Metadata.Name, "templates")
	res = &rendered{manifests: map[string]string{}}
	for _, name := range names {
		if strings.HasPrefix(path.Base(name), "_") {
			continue // partials only define templates
		}
		top["Template"] = map[string]interface{}{"Name": name, "BasePath": basePath}
		var buf strings.Builder
		if err := t.ExecuteTemplate(&buf, name, top); err != nil {
			return nil, cleanupExecError(err)
		}
		out := strings.ReplaceAll(buf.String(), "<no value>", "")
		if name == path.Join(basePath, "NOTES.txt") {
			res.notes = out
			continue
		}
		res.manifests[name] = out
	}
	return res, nil
}

var (
	// Go: `template: NAME:LINE:COL: executing "NAME" at <...>: error calling F: MSG`
	execCallErr = regexp.MustCompile(`(?s)template: ([^ ]+:\d+:\d+): executing "[^"]*" at <.*?>: error calling \w+: (.*)$`)
	// Go: `template: NAME:LINE: MSG`
	parseErr = regexp.MustCompile(`(?s)^template: ([^ ]+:\d+): (.*)$`)
)

// cleanupExecError turns errors raised by functions (required, fail,
// include ...) into Helm's "execution error at (FILE:LINE:COL): MSG",
// pointing at the innermost template. Other execution errors already name
// the file and line and are returned as they are.
func cleanupExecError(err error) error {
	msg := err.Error()
	loc, text := "", ""
	for {
		m := execCallErr.FindStringSubmatchIndex(msg)
		if m == nil {
			break
		}
		loc, text = msg[m[2]:m[3]], msg[m[4]:m[5]]
		msg = text // descend into nested include/tpl errors
	}
	if loc == "" {
		return err
	}
	return fmt.Errorf("execution error at (%s): %s", loc, text)
}

func cleanupParseError(err error) error {
	if m := parseErr.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Errorf("parse error at (%s): %s", m[1], m[2])
	}
	return err
}
