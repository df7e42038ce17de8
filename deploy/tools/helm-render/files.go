package main

import (
	"encoding/base64"
	"path"
	"sort"
	"strings"
)

// files is .Files: the chart's non-template files keyed by their path
// relative to the chart root. Its methods are the ones Helm's engine offers.
type files map[string][]byte

// Get returns a file's content, or "" if there is no such file (as Helm).
func (f files) Get(name string) string { return string(f[name]) }

func (f files) GetBytes(name string) []byte { return f[name] }

// Glob returns the files whose path matches pattern. Helm uses gobwas/glob;
// path.Match covers the usual "config/*.toml" patterns, and "**" is mapped
// to "match anything below" for the common "dir/**" form.
func (f files) Glob(pattern string) files {
	out := files{}
	for name, data := range f {
		if globMatch(pattern, name) {
			out[name] = data
		}
	}
	return out
}

func globMatch(pattern, name string) bool {
	if strings.HasSuffix(pattern, "/**") {
		return strings.HasPrefix(name, strings.TrimSuffix(pattern, "**"))
	}
	ok, _ := path.Match(pattern, name)
	return ok
}

// Lines splits a file into lines, as Helm's .Files.Lines.
func (f files) Lines(name string) []string {
	s := string(f[name])
	if s == "" {
		return []string{}
	}
	return strings.Split(s, "\n")
}

func (f files) sortedNames() []string {
	names := make([]string, 0, len(f))
	for n := range f {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// AsConfig renders the files as a ConfigMap data block (base name -> text).
func (f files) AsConfig() string {
	m := map[string]string{}
	for _, n := range f.sortedNames() {
		m[path.Base(n)] = string(f[n])
	}
	return toYAML(m)
}

// AsSecrets renders the files as a Secret data block (base name -> base64).
func (f files) AsSecrets() string {
	m := map[string]string{}
	for _, n := range f.sortedNames() {
		m[path.Base(n)] = base64.StdEncoding.EncodeToString(f[n])
	}
	return toYAML(m)
}
