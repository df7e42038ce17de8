// Command helm-render renders a Helm 3 chart the way `helm template` does,
// without Helm itself: Helm cannot be installed on the build machines (only
// Debian packages and PyPI are available), but Go's text/template and the
// Masterminds sprig function library, which Helm is built on, are packaged by
// Debian. The tests of the deploy/ tree use it to render the specline chart.
//
// The behaviour copied from Helm is documented in README.md next to this file;
// each Go file has one job:
//
//	main.go          command line and the top-level flow
//	chart.go         reading Chart.yaml, templates and files; kubeVersion check
//	values.go        values files, Helm's merge/coalesce rules, values.schema.json
//	strvals.go       the --set syntax
//	capabilities.go  .Capabilities (kube version, API versions)
//	files.go         .Files
//	funcs.go         the template function map (sprig + Helm's additions)
//	engine.go        executing the templates
//	output.go        splitting, validating and printing the manifests
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// multiFlag collects a flag that may be given several times (--values, --set).
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

const usage = `usage: helm-render --chart DIR [--values FILE]... [--set key=value[,key=value]]...
                   [--release NAME] [--namespace NS] [--kube-version 1.30.0]
                   [--api-versions group/version[/Kind][,...]]... [--output yaml|json] [--notes]
                   [--lookup-objects FILE]

Renders a Helm 3 chart like 'helm template' (see README.md for the exact
semantics and output formats). Exits non-zero on any template, values or
YAML error, naming the template file.
`

// options is the parsed command line.
type options struct {
	chartDir    string
	valueFiles  []string
	sets        []string
	release     string
	namespace   string
	kubeVersion string
	apiVersions []string
	output      string
	notes       bool
	lookupFile  string
}

var errHelp = errors.New("help requested")

// usageError marks a bad command line (exit status 2, like flag's default).
type usageError struct{ error }

func parseArgs(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("helm-render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // printed below: stdout for --help, stderr on errors
	var values, sets, apis multiFlag
	fs.StringVar(&o.chartDir, "chart", "", "chart directory")
	fs.Var(&values, "values", "values file (repeatable, later files win)")
	fs.Var(&values, "f", "alias of --values")
	fs.Var(&sets, "set", "key=value pairs (repeatable)")
	fs.StringVar(&o.release, "release", "release-name", "release name (helm template's default)")
	fs.StringVar(&o.namespace, "namespace", "default", "release namespace")
	fs.StringVar(&o.kubeVersion, "kube-version", defaultKubeVersion, "Kubernetes version for .Capabilities")
	fs.Var(&apis, "api-versions", "extra API versions for .Capabilities.APIVersions (repeatable, comma-separated)")
	fs.StringVar(&o.output, "output", "yaml", "yaml or json")
	fs.BoolVar(&o.notes, "notes", false, "also render templates/NOTES.txt")
	fs.StringVar(&o.lookupFile, "lookup-objects", "", "objects lookup finds (YAML/JSON list or List), standing in for a cluster")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		fmt.Fprint(stderr, usage)
		return nil, usageError{err}
	}
	if fs.NArg() > 0 {
		return nil, usageError{fmt.Errorf("unexpected arguments: %v", fs.Args())}
	}
	if o.chartDir == "" {
		return nil, usageError{errors.New("--chart is required")}
	}
	if o.output != "yaml" && o.output != "json" {
		return nil, usageError{fmt.Errorf("--output must be yaml or json, not %q", o.output)}
	}
	o.valueFiles, o.sets = values, sets
	// Like Helm's string-slice flag, one --api-versions may list several.
	for _, a := range apis {
		for _, v := range strings.Split(a, ",") {
			if v = strings.TrimSpace(v); v != "" {
				o.apiVersions = append(o.apiVersions, v)
			}
		}
	}
	return o, nil
}

// run is the whole program minus os.Exit, so the tests can drive it.
func run(args []string, stdout, stderr io.Writer) error {
	o, err := parseArgs(args, stderr)
	if err != nil {
		return err
	}
	ch, err := loadChart(o.chartDir)
	if err != nil {
		return err
	}
	caps, err := newCapabilities(o.kubeVersion, o.apiVersions)
	if err != nil {
		return err
	}
	if err := checkKubeVersion(ch.Metadata, caps.KubeVersion); err != nil {
		return err
	}
	vals, err := buildValues(ch, o.valueFiles, o.sets)
	if err != nil {
		return err
	}
	var objects []map[string]interface{}
	if o.lookupFile != "" {
		if objects, err = loadObjects(o.lookupFile); err != nil {
			return err
		}
	}
	rendered, err := renderChart(ch, vals, caps, o.release, o.namespace, objects)
	if err != nil {
		return err
	}
	docs, err := splitManifests(rendered.manifests)
	if err != nil {
		return err
	}
	notes := ""
	if o.notes {
		notes = rendered.notes
	}
	if o.output == "json" {
		return writeJSON(stdout, docs, notes, o.notes)
	}
	return writeYAML(stdout, docs, notes, o.notes)
}

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, errHelp) {
		fmt.Print(usage)
		os.Exit(0)
	}
	if err != nil {
		// Helm's own prefix, so messages read the same as `helm template`'s.
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
