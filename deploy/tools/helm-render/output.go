package main

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"

	"github.com/ghodss/yaml"
)

// doc is one YAML document of the rendered chart.
type doc struct {
	source  string          // "<chart>/templates/x.yaml"
	content string          // trimmed YAML text
	json    json.RawMessage // the document as JSON ("null" if only comments)
}

// sep is Helm's releaseutil document separator.
var sep = regexp.MustCompile(`(?:^|\s*\n)---\s*`)

// splitManifests splits every rendered file into documents the way
// releaseutil.SplitManifests does (whitespace-only documents vanish, the
// rest are trimmed), orders them by source path and then position, and
// checks that each is YAML whose top level is a mapping, which is what Helm
// demands when it reads each document's apiVersion/kind/metadata head.
func splitManifests(files map[string]string) ([]doc, error) {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var docs []doc
	for _, name := range names {
		for _, d := range sep.Split(strings.TrimSpace(files[name]), -1) {
			d = strings.TrimSpace(d)
			if d == "" {
				continue
			}
			j, err := yaml.YAMLToJSON([]byte(d))
			if err != nil {
				return nil, fmt.Errorf("YAML parse error on %s: error converting YAML to JSON: %v", name, err)
			}
			if s := strings.TrimSpace(string(j)); s != "null" && !strings.HasPrefix(s, "{") {
				return nil, fmt.Errorf("YAML parse error on %s: the document is not a mapping: %.60q", name, d)
			}
			docs = append(docs, doc{source: name, content: d, json: j})
		}
	}
	return docs, nil
}

// writeYAML prints the documents like `helm template`. With --notes the
// rendered NOTES.txt follows as comment lines under "# NOTES:", so the
// whole output stays a valid YAML stream.
func writeYAML(w io.Writer, docs []doc, notes string, withNotes bool) error {
	var b strings.Builder
	for _, d := range docs {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", d.source, d.content)
	}
	if withNotes {
		b.WriteString("# NOTES:\n")
		if n := strings.TrimRight(notes, "\n \t"); n != "" {
			for _, line := range strings.Split(n, "\n") {
				b.WriteString(strings.TrimRight("# "+line, " ") + "\n")
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

type jsonManifest struct {
	Source   string          `json:"source"`
	Manifest json.RawMessage `json:"manifest"`
}

// writeJSON prints [{"source", "manifest"}...], or with --notes
// {"manifests": [...], "notes": "..."}. Comment-only documents are skipped.
func writeJSON(w io.Writer, docs []doc, notes string, withNotes bool) error {
	list := []jsonManifest{}
	for _, d := range docs {
		if strings.TrimSpace(string(d.json)) == "null" {
			continue
		}
		list = append(list, jsonManifest{Source: d.source, Manifest: d.json})
	}
	var v interface{} = list
	if withNotes {
		v = struct {
			Manifests []jsonManifest `json:"manifests"`
			Notes     string         `json:"notes"`
		}{list, notes}
	}
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(out, '\n'))
	return err
}
