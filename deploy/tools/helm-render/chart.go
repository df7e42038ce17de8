package main

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/Masterminds/semver"
	"github.com/ghodss/yaml"
)

// Maintainer and Dependency mirror helm.sh/helm/v3/pkg/chart; templates see
// them through .Chart with Helm's Go field names.
type Maintainer struct {
	Name  string `json:"name,omitempty"`
	Email string `json:"email,omitempty"`
	URL   string `json:"url,omitempty"`
}

type Dependency struct {
	Name         string        `json:"name"`
	Version      string        `json:"version,omitempty"`
	Repository   string        `json:"repository"`
	Condition    string        `json:"condition,omitempty"`
	Tags         []string      `json:"tags,omitempty"`
	Enabled      bool          `json:"enabled,omitempty"`
	ImportValues []interface{} `json:"import-values,omitempty"`
	Alias        string        `json:"alias,omitempty"`
}

// Metadata is Chart.yaml. It is a struct (not a map) as in Helm, so
// `.Chart.Name` works and a misspelt field is a template error, as in Helm.
type Metadata struct {
	Name         string            `json:"name,omitempty"`
	Home         string            `json:"home,omitempty"`
	Sources      []string          `json:"sources,omitempty"`
	Version      string            `json:"version,omitempty"`
	Description  string            `json:"description,omitempty"`
	Keywords     []string          `json:"keywords,omitempty"`
	Maintainers  []*Maintainer     `json:"maintainers,omitempty"`
	Icon         string            `json:"icon,omitempty"`
	APIVersion   string            `json:"apiVersion,omitempty"`
	Condition    string            `json:"condition,omitempty"`
	Tags         string            `json:"tags,omitempty"`
	AppVersion   string            `json:"appVersion,omitempty"`
	Deprecated   bool              `json:"deprecated,omitempty"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	KubeVersion  string            `json:"kubeVersion,omitempty"`
	Dependencies []*Dependency     `json:"dependencies,omitempty"`
	Type         string            `json:"type,omitempty"`
}

// Chart is a loaded chart directory.
type Chart struct {
	Metadata *Metadata
	// Templates maps "templates/<rel path>" to the file's text.
	Templates map[string]string
	// Values is the parsed values.yaml (empty map if there is none).
	Values map[string]interface{}
	// Schema is values.schema.json, nil if absent.
	Schema []byte
	// Files holds every other file, which Helm exposes as .Files.
	Files files
}

// loadChart reads a chart directory the way Helm's loader sorts its files:
// Chart.yaml -> metadata, values.yaml -> defaults, values.schema.json ->
// schema, templates/** -> templates, everything else -> .Files.
// Subcharts (charts/) are not supported; see README.md.
func loadChart(dir string) (*Chart, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, fmt.Errorf("%s is not a chart: %v", dir, err)
	}
	md := &Metadata{}
	if err := yaml.Unmarshal(raw, md); err != nil {
		return nil, fmt.Errorf("cannot load Chart.yaml: %v", err)
	}
	// Helm's metadata validation, reduced to what rendering relies on.
	if md.Name == "" {
		return nil, fmt.Errorf("validation: chart.metadata.name is required")
	}
	if md.Version == "" {
		return nil, fmt.Errorf("validation: chart.metadata.version is required")
	}
	if _, err := semver.NewVersion(md.Version); err != nil {
		return nil, fmt.Errorf("validation: chart.metadata.version %q is invalid", md.Version)
	}

	ch := &Chart{Metadata: md, Templates: map[string]string{}, Values: map[string]interface{}{}, Files: files{}}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "charts" {
				// `helm create` leaves an empty charts/; only real subcharts are refused.
				if ents, _ := os.ReadDir(p); len(ents) > 0 {
					return fmt.Errorf("subcharts (%s/charts) are not supported by helm-render", dir)
				}
				return fs.SkipDir
			}
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch {
		case rel == "Chart.yaml" || rel == ".helmignore" || rel == "Chart.lock":
		case rel == "values.yaml":
			v, err := parseValues(data)
			if err != nil {
				return fmt.Errorf("cannot load values.yaml: %v", err)
			}
			ch.Values = v
		case rel == "values.schema.json":
			ch.Schema = data
		case strings.HasPrefix(rel, "templates/"):
			ch.Templates[rel] = string(data)
		default:
			ch.Files[rel] = data
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ch, nil
}

// templateName is the name Helm gives a template: "<chart>/templates/x.yaml".
// It appears in "# Source:" lines, error messages and .Template.Name.
func (c *Chart) templateName(rel string) string { return path.Join(c.Metadata.Name, rel) }

// sortedTemplates lists the template paths in lexical order.
func (c *Chart) sortedTemplates() []string {
	keys := make([]string, 0, len(c.Templates))
	for k := range c.Templates {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// checkKubeVersion fails like `helm template` when Chart.yaml's kubeVersion
// constraint does not accept the target cluster version.
func checkKubeVersion(md *Metadata, kv KubeVersion) error {
	if md.KubeVersion == "" {
		return nil
	}
	c, err := semver.NewConstraint(md.KubeVersion)
	if err != nil {
		return fmt.Errorf("chart %s has an invalid kubeVersion %q: %v", md.Name, md.KubeVersion, err)
	}
	v, err := semver.NewVersion(kv.Version)
	if err != nil {
		return err
	}
	if !c.Check(v) {
		return fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s", md.KubeVersion, kv.Version)
	}
	return nil
}
