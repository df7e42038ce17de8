package main

// End-to-end tests: render testdata/fixture through run() and compare with
// manifests written by hand from Helm 3's documented behaviour. Each test
// names the Helm behaviour it pins.

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const fixture = "testdata/fixture"

func render(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(append([]string{"--chart", fixture}, args...), &out, &errOut)
	return out.String(), err
}

func mustRender(t *testing.T, args ...string) string {
	t.Helper()
	out, err := render(t, args...)
	if err != nil {
		t.Fatalf("render %v: %v", args, err)
	}
	return out
}

func mustFail(t *testing.T, wantSubstrings []string, args ...string) {
	t.Helper()
	out, err := render(t, args...)
	if err == nil {
		t.Fatalf("render %v succeeded, want an error; output:\n%s", args, out)
	}
	for _, s := range wantSubstrings {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
}

// renderJSON returns source -> manifests (in order) from --output json.
func renderJSON(t *testing.T, args ...string) map[string][]map[string]interface{} {
	t.Helper()
	out := mustRender(t, append(args, "--output", "json")...)
	var list []struct {
		Source   string                 `json:"source"`
		Manifest map[string]interface{} `json:"manifest"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("json output does not parse: %v\n%s", err, out)
	}
	m := map[string][]map[string]interface{}{}
	for _, e := range list {
		m[e.Source] = append(m[e.Source], e.Manifest)
	}
	return m
}

// get walks a decoded manifest: get(m, "spec", "replicas").
func get(t *testing.T, v interface{}, path ...interface{}) interface{} {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]interface{})
			if !ok {
				t.Fatalf("%v: not a map at %q", path, k)
			}
			v = m[k]
		case int:
			l, ok := v.([]interface{})
			if !ok || k >= len(l) {
				t.Fatalf("%v: no index %d", path, k)
			}
			v = l[k]
		}
	}
	return v
}

func toJSONString(v interface{}) string { b, _ := json.Marshal(v); return string(b) }

// The default render, byte for byte as `helm template release-name fixture`
// prints it (modulo Helm's kind-based ordering, see README.md). It pins:
//   - "---\n# Source: <chart>/templates/<file>\n" headers, documents trimmed;
//   - partials (_helpers.tpl) shared by every file through include, and
//     `include ... | nindent 4` indentation;
//   - toYaml: sorted keys, quoted "2", no trailing newline (so nindent leaves
//     no blank line), Kubernetes-style lists;
//   - tpl evaluating a string from values against the top-level object;
//   - missing keys render as "" (missingkey=zero + "<no value>" removal);
//   - values.yaml numbers are float64 (1000000 renders as 1e+06, as in Helm);
//   - .Release defaults of helm template (release-name, default, Helm,
//     IsInstall, Revision 1), .Template.Name/BasePath, .Files.Get, lookup
//     returning an empty map, .Capabilities.KubeVersion for 1.30.0;
//   - APIVersions.Has "policy/v1" true by default, ServiceMonitor absent;
//   - templates that render only whitespace (secret, broken, servicemonitor)
//     produce no document; a comment-only document is kept in yaml output;
//   - templates/extra/ is rendered (templates/ is walked recursively).
const wantDefault = `---
# Source: fixture/templates/configmap.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: release-name-fixture-config
  namespace: default
data:
  template: fixture/templates/configmap.yaml
  basePath: fixture/templates
  kube: "1.30 v1.30.0"
  release: "Helm install=true upgrade=false rev=1"
  missing: ""
  big: "1e+06"
  args: "[]"
  debug.yaml: |
    enabled: false
    level: info
  app.conf: "listen = 0.0.0.0\n"
  lookup: "0"
---
# Source: fixture/templates/configmap.yaml
# a comment-only document: kept by yaml output, skipped by json output
---
# Source: fixture/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: release-name-fixture
  labels:
    app.kubernetes.io/name: fixture
    app.kubernetes.io/instance: release-name
    app.kubernetes.io/version: "1.2.3"
    helm.sh/chart: fixture-0.1.0
    tier: serving
  annotations:
    rendered-by: "release=release-name"
spec:
  replicas: 2
  template:
    spec:
      containers:
      - name: s0
        image: "ghcr.io/example/specline:1.2.3"
        args: ["--layers", "0:15"]
        resources:
          limits:
            cpu: "2"
            memory: 4Gi
          requests:
            cpu: 500m
      - name: s1
        image: "ghcr.io/example/specline:1.2.3"
        args: ["--layers", "16:31"]
        resources:
          limits:
            cpu: "2"
            memory: 4Gi
          requests:
            cpu: 500m
---
# Source: fixture/templates/extra/pdb.yaml
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: release-name-fixture
spec:
  minAvailable: 1
---
# Source: fixture/templates/service.yaml
apiVersion: v1
kind: Service
metadata:
  name: release-name-fixture
spec:
  ports:
  - name: grpc
    port: 50051
---
# Source: fixture/templates/service.yaml
apiVersion: v1
kind: Service
metadata:
  name: release-name-fixture-headless
spec:
  clusterIP: None
`

func TestDefaultRender(t *testing.T) {
	if got := mustRender(t); got != wantDefault {
		t.Errorf("default render differs.\n--- got ---\n%s\n--- want ---\n%s", got, wantDefault)
	}
}

// Helm's -f handling: files merge in order with maps merged recursively and
// the later file winning; a null in a user file deletes the chart default
// (labels.tier, resources.requests); unrelated defaults survive
// (resources.limits.cpu, debug.level); scalars are replaced (replicas, tag).
func TestValuesFilesMergeAndNullDeletion(t *testing.T) {
	m := renderJSON(t, "--values", "testdata/values-a.yaml", "-f", "testdata/values-b.yaml")
	dep := m["fixture/templates/deployment.yaml"][0]
	if got := get(t, dep, "spec", "replicas"); got != 4.0 {
		t.Errorf("replicas = %v, want 4 (values-b wins over values-a)", got)
	}
	labels := toJSONString(get(t, dep, "metadata", "labels"))
	want := `{"app.kubernetes.io/instance":"release-name","app.kubernetes.io/name":"fixture","app.kubernetes.io/version":"1.2.3","helm.sh/chart":"fixture-0.1.0","team":"ml"}`
	if labels != want {
		t.Errorf("labels = %s\nwant     %s", labels, want)
	}
	c := get(t, dep, "spec", "template", "spec", "containers", 1)
	if got := toJSONString(get(t, c, "resources")); got != `{"limits":{"cpu":"2","memory":"8Gi"}}` {
		t.Errorf("resources = %s", got)
	}
	if got := get(t, c, "image"); got != "ghcr.io/example/specline:2.0" {
		t.Errorf("image = %v", got)
	}
	cm := m["fixture/templates/configmap.yaml"][0]
	if got := get(t, cm, "data", "debug.yaml"); got != "enabled: true\nlevel: info\n" {
		t.Errorf("debug.yaml = %q", got)
	}
}

// Helm's --set (strvals): comma-separated pairs, nested keys, {a,b} lists,
// list indexes creating a list of maps, typed values (6000 and 3 are ints,
// "0123" stays a string because of the leading zero, true is a bool),
// null deleting a default, and --set applied after -f files.
func TestSetValues(t *testing.T) {
	m := renderJSON(t,
		"-f", "testdata/values-a.yaml",
		"--set", "gateway.port=6000,image.tag=0123",
		"--set", "debug.level=3,debug.enabled=true",
		"--set", "extraArgs={--verbose,--log=json}",
		"--set", "tolerations[0].key=gpu,tolerations[0].operator=Exists",
		"--set", "labels=null",
		"--set", "replicas=5")
	dep := m["fixture/templates/deployment.yaml"][0]
	if got := get(t, dep, "spec", "replicas"); got != 5.0 {
		t.Errorf("replicas = %v, want 5 (--set wins over -f)", got)
	}
	if got := toJSONString(get(t, dep, "metadata", "labels")); strings.Contains(got, "team") || strings.Contains(got, "tier") {
		t.Errorf("labels=null should delete all custom labels, got %s", got)
	}
	if got := get(t, dep, "spec", "template", "spec", "containers", 0, "image"); got != "ghcr.io/example/specline:0123" {
		t.Errorf("image = %v", got)
	}
	if got := toJSONString(get(t, dep, "spec", "template", "spec", "tolerations")); got != `[{"key":"gpu","operator":"Exists"}]` {
		t.Errorf("tolerations = %s", got)
	}
	cm := m["fixture/templates/configmap.yaml"][0]
	if got := get(t, cm, "data", "debug.yaml"); got != "enabled: true\nlevel: 3\n" {
		t.Errorf("debug.yaml = %q (level must be an integer, enabled a bool)", got)
	}
	if got := get(t, cm, "data", "args"); got != `["--verbose","--log=json"]` {
		t.Errorf("args = %v", got)
	}
	svc := m["fixture/templates/service.yaml"][0]
	if got := get(t, svc, "spec", "ports", 0, "port"); got != 6000.0 {
		t.Errorf("port = %v", got)
	}
}

// .Capabilities.APIVersions.Has is an exact match on "group/version" or
// "group/version/Kind", and --api-versions adds to the built-in set:
// the ServiceMonitor appears only when its Kind entry is declared.
func TestAPIVersionsGate(t *testing.T) {
	const sm = "fixture/templates/servicemonitor.yaml"
	if m := renderJSON(t); len(m[sm]) != 0 {
		t.Errorf("ServiceMonitor rendered without the API")
	}
	if m := renderJSON(t, "--api-versions", "monitoring.coreos.com/v1"); len(m[sm]) != 0 {
		t.Errorf("ServiceMonitor rendered with only the group/version (template asks for the Kind)")
	}
	m := renderJSON(t, "--api-versions", "example.com/v1,monitoring.coreos.com/v1/ServiceMonitor")
	if len(m[sm]) != 1 || get(t, m[sm][0], "kind") != "ServiceMonitor" {
		t.Errorf("ServiceMonitor missing with the API declared: %v", m[sm])
	}
}

// Chart.yaml kubeVersion is checked against the target cluster version with
// semver constraints, failing with Helm's message.
func TestKubeVersionConstraint(t *testing.T) {
	mustFail(t, []string{"chart requires kubeVersion: >=1.25.0-0 which is incompatible with Kubernetes v1.24.0"},
		"--kube-version", "1.24.0")
	out := mustRender(t, "--kube-version", "v1.27.3")
	if !strings.Contains(out, `kube: "1.27 v1.27.3"`) {
		t.Errorf(".Capabilities.KubeVersion not taken from --kube-version:\n%s", out)
	}
}

// `required` fails the render with its message and the template location
// (Helm: "execution error at (<file>:<line>:<col>): <msg>"); given the
// value, the guarded template renders.
func TestRequired(t *testing.T) {
	mustFail(t, []string{"execution error at (fixture/templates/secret.yaml:7:", "gateway.token is required when gateway.auth is true"},
		"--set", "gateway.auth=true")
	m := renderJSON(t, "--set", "gateway.auth=true,gateway.token=s3cret")
	if got := get(t, m["fixture/templates/secret.yaml"][0], "stringData", "token"); got != "s3cret" {
		t.Errorf("token = %v", got)
	}
}

// `fail` inside a partial reports the partial's location.
func TestFailInPartial(t *testing.T) {
	mustFail(t, []string{"execution error at (fixture/templates/_helpers.tpl:18:", "replicas must not be negative"},
		"--set", "replicas=-1")
}

// Rendered output that is not YAML fails like Helm's
// "YAML parse error on <file>: ..." with the line inside the document.
func TestInvalidYAMLOutput(t *testing.T) {
	mustFail(t, []string{"YAML parse error on fixture/templates/broken.yaml", "line 7"}, "--set", "broken=true")
}

// A values file that is not YAML fails with the file name.
func TestInvalidValuesFile(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("a: [1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustFail(t, []string{"failed to parse " + bad}, "-f", bad)
}

// values.schema.json is enforced on the final values, with Helm's message.
func TestSchemaValidation(t *testing.T) {
	mustFail(t, []string{"values don't meet the specifications of the schema(s)", "fixture:", "- replicas: Invalid type. Expected: integer, given: string"},
		"--set", "replicas=two")
	mustFail(t, []string{"gateway.port: Must be greater than or equal to 1"}, "--set", "gateway.port=0")
}

// NOTES.txt is rendered only with --notes and never as a manifest; yaml
// mode appends it as "# NOTES:" comment lines, json mode wraps the list.
func TestNotes(t *testing.T) {
	if out := mustRender(t); strings.Contains(out, "NOTES") || strings.Contains(out, "installed as") {
		t.Errorf("NOTES.txt leaked into the manifests:\n%s", out)
	}
	out := mustRender(t, "--notes", "--release", "r1", "--namespace", "ns1")
	wantTail := "# NOTES:\n# fixture 0.1.0 (app 1.2.3) installed as r1 in ns1.\n# No ServiceMonitor: the cluster lacks monitoring.coreos.com/v1.\n"
	if !strings.HasSuffix(out, wantTail) {
		t.Errorf("yaml notes: got tail\n%s", out[len(out)-200:])
	}
	js := mustRender(t, "--notes", "--output", "json", "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
	var v struct {
		Manifests []map[string]interface{} `json:"manifests"`
		Notes     string                   `json:"notes"`
	}
	if err := json.Unmarshal([]byte(js), &v); err != nil {
		t.Fatal(err)
	}
	if v.Notes != "fixture 0.1.0 (app 1.2.3) installed as release-name in default.\n" {
		t.Errorf("json notes = %q", v.Notes)
	}
	// 1 ConfigMap (its comment-only document skipped), Deployment, PDB,
	// 2 Services, ServiceMonitor.
	if len(v.Manifests) != 6 {
		t.Errorf("json manifests: %d, want 6", len(v.Manifests))
	}
}

// Template and parse errors name the template file and line.
func TestTemplateErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, text string) {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("Chart.yaml", "apiVersion: v2\nname: c\nversion: 1.0.0\n")
	write("templates/a.yaml", "a: 1\nb: {{ .Values.x.y.z }}\n")
	var out, errOut bytes.Buffer
	err := run([]string{"--chart", dir}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "c/templates/a.yaml:2") {
		t.Errorf("nil map access: got %v", err)
	}
	write("templates/a.yaml", "a: {{ if }}\n")
	err = run([]string{"--chart", dir}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "parse error at (c/templates/a.yaml:1)") {
		t.Errorf("parse error: got %v", err)
	}
	// env and expandenv are removed from sprig, as Helm does.
	write("templates/a.yaml", "a: {{ env \"HOME\" }}\n")
	err = run([]string{"--chart", dir}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), `function "env" not defined`) {
		t.Errorf("env: got %v", err)
	}
	// include recursion is bounded (Helm: 1000 levels; lowered for speed).
	defer func(n int) { recursionMax = n }(recursionMax)
	recursionMax = 20
	write("templates/a.yaml", "{{- define \"loop\" }}{{ include \"loop\" . }}{{ end }}a: {{ include \"loop\" . }}\n")
	err = run([]string{"--chart", dir}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "nested reference name: loop") {
		t.Errorf("include recursion: got %v", err)
	}
}

// fromYaml/toJson round trips and tpl with a nested define resolve inside
// the shared template set; Files.Glob/AsConfig produce ConfigMap data.
func TestHelmFunctions(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "templates"), 0o755)
	os.MkdirAll(filepath.Join(dir, "conf"), 0o755)
	os.WriteFile(filepath.Join(dir, "Chart.yaml"), []byte("apiVersion: v2\nname: c\nversion: 1.0.0\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "conf", "a.txt"), []byte("A"), 0o644)
	os.WriteFile(filepath.Join(dir, "conf", "b.txt"), []byte("B"), 0o644)
	os.WriteFile(filepath.Join(dir, "values.yaml"), []byte("greeting: '{{ include \"hi\" . }}'\nobj:\n  k: [1, 2]\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "templates", "_h.tpl"), []byte(`{{ define "hi" }}hi {{ .Release.Name }}{{ end }}`), 0o644)
	os.WriteFile(filepath.Join(dir, "templates", "cm.yaml"), []byte(`apiVersion: v1
kind: ConfigMap
data:
  tpl: {{ tpl .Values.greeting . | quote }}
  json: {{ toJson .Values.obj | quote }}
  roundtrip: {{ (fromYaml (toYaml .Values.obj)).k | toJson | quote }}
  bad: {{ (fromYaml "a: [").Error | empty | not | quote }}
  {{- (.Files.Glob "conf/*.txt").AsConfig | nindent 2 }}
`), 0o644)
	var out, errOut bytes.Buffer
	if err := run([]string{"--chart", dir, "--release", "r"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	want := `---
# Source: c/templates/cm.yaml
apiVersion: v1
kind: ConfigMap
data:
  tpl: "hi r"
  json: "{\"k\":[1,2]}"
  roundtrip: "[1,2]"
  bad: "true"
  a.txt: A
  b.txt: B
`
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}

// --lookup-objects stands in for a cluster: lookup finds an object by
// apiVersion, kind, namespace and name (Helm's lookup during install or
// upgrade), an empty name lists the namespace's objects of that kind as a
// <Kind>List, and anything else is an empty map as with helm template.
func TestLookupObjects(t *testing.T) {
	objs := filepath.Join(t.TempDir(), "objects.yaml")
	if err := os.WriteFile(objs, []byte(`
- apiVersion: v1
  kind: Secret
  metadata: {name: x, namespace: default}
  type: Opaque
  data: {k: dg==}
- apiVersion: v1
  kind: Secret
  metadata: {name: y, namespace: other}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cm := renderJSON(t, "--lookup-objects", objs)["fixture/templates/configmap.yaml"][0]
	if got := cm["data"].(map[string]interface{})["lookup"]; got != "5" {
		t.Errorf("lookup of an object the cluster has: len = %v, want 5 (apiVersion, kind, metadata, type, data)", got)
	}
	cm = renderJSON(t)["fixture/templates/configmap.yaml"][0]
	if got := cm["data"].(map[string]interface{})["lookup"]; got != "0" {
		t.Errorf("lookup without --lookup-objects: len = %v, want 0", got)
	}

	list, err := loadObjects(objs)
	if err != nil {
		t.Fatal(err)
	}
	lookup := lookupIn(list)
	for _, c := range []struct {
		ns, name string
		want     int // keys of the object, or items of the list
	}{{"default", "x", 5}, {"other", "x", 0}, {"default", "z", 0}, {"other", "", 1}, {"", "", 2}, {"none", "", 0}} {
		got, _ := lookup("v1", "Secret", c.ns, c.name)
		n := len(got)
		if c.name == "" {
			if got["kind"] != "SecretList" {
				t.Errorf("lookup(%q, %q): kind %v, want SecretList", c.ns, c.name, got["kind"])
			}
			n = len(got["items"].([]interface{}))
		}
		if n != c.want {
			t.Errorf("lookup(%q, %q) = %v, want %d", c.ns, c.name, got, c.want)
		}
	}
	if got, _ := lookup("v1", "ConfigMap", "default", "x"); len(got) != 0 {
		t.Errorf("lookup matched another kind: %v", got)
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("- just a string\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustFail(t, []string{"--lookup-objects", "item 0"}, "--lookup-objects", bad)
}
