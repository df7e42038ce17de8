#!/usr/bin/env python3
"""Renders and lints a Helm chart with Helm itself: Helm v4's Go SDK through
helm-python-sdk (PyPI, import name helm_python; a ctypes binding over
libhelm_c, no helm binary and no Go toolchain). scripts/setup.sh installs it
into ~/.cache/specline/helm-venv; run this with that venv's python.

What is Helm's own here: loading the chart, coalescing the values with the
chart's values.yaml, values.schema.json, every template function, `lookup`
(client-go against an API server), .Capabilities, `--set` parsing
(strvals), YAML parsing of values files and of the rendered documents
(sigs.k8s.io/yaml), and lint. What is this file's: the `helm template`
command-line glue around them, i.e.

  - values files merged in order (maps recursively, later wins), then every
    --set applied on top, as Helm's CLI does (pkg/cli/values). One
    difference: a --set with a list index (`l[0].k=v`) into a list that a
    values file provides replaces that list, where Helm would set the
    element (--set expressions among themselves behave as in Helm);
  - Chart.yaml's kubeVersion checked against the target version, with
    Helm's message (install's check, chartutil.IsCompatibleRange, evaluated
    by Helm's own semverCompare: the SDK's render does not make it);
  - the rendered files split into documents as Helm's releaseutil does,
    NOTES.txt kept apart, documents in source path order (not Helm's
    install order by kind);
  - `lookup` during an upgrade: with cluster objects given, the chart is
    rendered against a stand-in API server on 127.0.0.1 that holds only
    those objects (discovery, get and list), so Helm's real lookup code
    finds them; without, lookup finds nothing, as with `helm template`.

As a module: render(), lint(). As a command:

    helm_chart.py render --chart DIR [-f FILE]... [--set k=v[,k=v]]...
        [--release NAME] [--namespace NS] [--kube-version V]
        [--api-versions g/v[/Kind][,...]]... [--lookup-objects FILE]
        [--upgrade] [--notes] [--output yaml|json]
    helm_chart.py lint --chart DIR [-f FILE]... [--set ...]
        [--namespace NS] [--kube-version V] [--strict]

render's yaml output is `helm template`'s ("---\\n# Source: ..."; with
--notes, the notes as trailing "# " comment lines); json is
[{"source", "manifest"}, ...], or {"manifests": [...], "notes": "..."} with
--notes. lint prints Helm's findings and exits 1 when lint fails (errors;
with --strict also warnings), as `helm lint [--strict]`. Errors: exit 1
with `Error: <Helm's message>`.
"""
import argparse
import contextlib
import http.server
import io
import json
import re
import sys
import tarfile
import threading
import urllib.parse

try:
    import helm_python as helm
    from helm_python import _native
except ImportError as e:  # not the helm venv's python
    raise SystemExit(
        f"helm_chart.py: helm-python-sdk is not importable by {sys.executable} ({e}). Run this with the "
        "Helm venv's python (~/.cache/specline/helm-venv/bin/python, made by scripts/setup.sh), or "
        "`python -m pip install helm-python-sdk==0.2.2` into a venv of your own.") from None

HELM_SDK_PIN = "0.2.2"  # the helm-python-sdk scripts/setup.sh installs (Helm v4.2.3 inside)
if helm.__version__ != HELM_SDK_PIN:  # _render_raw speaks this version's C ABI options
    raise SystemExit(f"helm_chart.py: helm-python-sdk {helm.__version__} at {sys.executable}, expected "
                     f"{HELM_SDK_PIN} (scripts/setup.sh installs it)")


class ChartError(RuntimeError):
    """Helm refused the chart or the values; the message is Helm's."""


class Rendered:
    """manifests: [{"source": "<chart>/templates/<file>", "manifest": {...}}]
    in source path order; notes: the rendered NOTES.txt ("" when none)."""

    def __init__(self, manifests, notes, texts):
        self.manifests, self.notes, self.texts = manifests, notes, texts

    def docs(self):
        return [m["manifest"] for m in self.manifests]

    def yaml(self, notes=False):
        """`helm template`'s output: each document under its Source comment."""
        out = []
        for source, text in self.texts:
            out.append(f"---\n# Source: {source}\n{text}\n")
        if notes and self.notes:
            out.append("# NOTES:\n" + "".join(f"# {line}\n" if line else "#\n"
                                              for line in self.notes.rstrip("\n").split("\n")))
        return "".join(out)


def _msg(e):
    """Helm's message of a helm_python error."""
    return getattr(e, "detail", None) or str(e)


# --- values, as `helm template -f ... --set ...` composes them --------------

def _merge_maps(a, b):
    """Helm's CLI mergeMaps: maps merge recursively, anything else in b wins."""
    out = dict(a)
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge_maps(out[k], v)
        else:
            out[k] = v
    return out


def _read_text(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        raise ChartError(f"failed to read {path}: {e}") from None


def user_values(values_files=(), sets=()):
    """The user-supplied values: each values file merged in order, then the
    --set expressions (parsed together by Helm's strvals, so later ones
    build on earlier ones as Helm's repeated --set do)."""
    base = {}
    for path in values_files:
        text = _read_text(path)
        try:
            base = _merge_maps(base, helm.values_from_yaml(text))
        except helm.HelmError as e:
            raise ChartError(f"failed to parse {path}: {_msg(e)}") from None
    sets = [s for s in sets if s]
    if sets:
        try:
            parsed = helm.parse_set_string(",".join(sets))
        except helm.HelmError as e:
            raise ChartError(f"failed parsing --set data: {_msg(e)}") from None
        base = _merge_maps(base, parsed)
    return base


# --- kubeVersion ------------------------------------------------------------

_PROBE_TEMPLATE = ("{{ .Capabilities.KubeVersion.Version }} "
                   "{{ semverCompare .Values.constraint .Capabilities.KubeVersion.Version }}")


def _probe_chart():
    """A one-template chart, in memory, that asks Helm for the target
    Kubernetes version and whether it satisfies a constraint."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, text in {"Chart.yaml": "apiVersion: v2\nname: kubeversion-probe\nversion: 0.0.0\n",
                           "templates/probe.txt": _PROBE_TEMPLATE}.items():
            data = text.encode()
            info = tarfile.TarInfo(f"kubeversion-probe/{name}")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return helm.Chart.load_archive(buf.getvalue())


def check_kube_version(constraint, kube_version=None):
    """Helm install's check of Chart.yaml's kubeVersion against the target
    version (Helm's default when None); raises ChartError with Helm's
    message."""
    if not constraint:
        return
    opts = {"kube_version": kube_version} if kube_version else {}
    with _probe_chart() as probe:
        try:
            out = _render_raw(probe, {"constraint": constraint}, opts)
        except helm.HelmError as e:
            raise ChartError(f"kubeVersion {constraint!r} / {kube_version!r}: {_msg(e)}") from None
    version, ok = next(iter(out.values())).split()
    if ok != "true":
        raise ChartError(f"chart requires kubeVersion: {constraint} which is incompatible with Kubernetes {version}")


# --- lookup: a stand-in API server ------------------------------------------

def _plural(kind):
    k = kind.lower()
    return k + "es" if k.endswith(("s", "x", "ch", "sh")) else k[:-1] + "ies" if k.endswith("y") else k + "s"


# Kinds whose objects are not namespaced (the rest of what lookup may ask).
_CLUSTER_SCOPED = {"Namespace", "Node", "PersistentVolume", "ClusterRole", "ClusterRoleBinding", "StorageClass",
                   "CustomResourceDefinition", "PriorityClass"}
# Discovery always lists these, as a real API server does, so lookup of a
# kind the stand-in holds no object of finds nothing instead of failing.
_BUILTIN = {"v1": ["Secret", "ConfigMap", "Service", "ServiceAccount", "PersistentVolumeClaim", "Pod",
                   "Namespace"],
            "apps/v1": ["Deployment", "StatefulSet"], "policy/v1": ["PodDisruptionBudget"]}


class _StandInAPI(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, objects):
        super().__init__(("127.0.0.1", 0), _StandInHandler)
        self.objects = objects
        self.kinds = {}  # groupVersion -> {plural: kind}
        for gv, kinds in _BUILTIN.items():
            for kind in kinds:
                self.kinds.setdefault(gv, {})[_plural(kind)] = kind
        for o in objects:
            self.kinds.setdefault(o["apiVersion"], {})[_plural(o["kind"])] = o["kind"]


class _StandInHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def not_found(self, what):
        self.reply(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                         "code": 404, "message": f"{what} not found"})

    def do_GET(self):
        parts = [urllib.parse.unquote(p) for p in urllib.parse.urlsplit(self.path).path.split("/") if p]
        if parts[:1] == ["api"] and len(parts) >= 2:
            gv, rest = parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            gv, rest = f"{parts[1]}/{parts[2]}", parts[3:]
        else:
            return self.not_found(self.path)
        kinds = self.server.kinds.get(gv)
        if kinds is None:
            return self.not_found(f"group/version {gv}")
        if not rest:  # discovery
            return self.reply(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": [
                {"name": plural, "singularName": kind.lower(), "kind": kind, "verbs": ["get", "list"],
                 "namespaced": kind not in _CLUSTER_SCOPED} for plural, kind in sorted(kinds.items())]})
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        if rest[0] not in kinds or len(rest) > 2:
            return self.not_found(self.path)
        kind = kinds[rest[0]]
        found = [o for o in self.server.objects if o["apiVersion"] == gv and o["kind"] == kind
                 and (namespace is None or o.get("metadata", {}).get("namespace") == namespace)]
        if len(rest) == 2:
            match = [o for o in found if o.get("metadata", {}).get("name") == rest[1]]
            return self.reply(200, match[0]) if match else self.not_found(f"{kind} {namespace}/{rest[1]}")
        return self.reply(200, {"apiVersion": gv, "kind": f"{kind}List", "metadata": {}, "items": found})


@contextlib.contextmanager
def _cluster(objects):
    """A helm_python.Config whose API server holds `objects`."""
    server = _StandInAPI(objects)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    kubeconfig = json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "stand-in",
        "clusters": [{"name": "stand-in", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "stand-in", "user": {}}],
        "contexts": [{"name": "stand-in", "context": {"cluster": "stand-in", "user": "stand-in"}}]})
    try:
        with helm.Config(kubeconfig_content=kubeconfig) as cfg:
            yield cfg
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def load_objects(path):
    """Objects for lookup from a YAML or JSON file: a list, a List with
    items, or one object."""
    text = _read_text(path)
    try:
        data = json.loads(text)
    except ValueError:
        try:
            data = helm.values_from_yaml(text)
        except helm.HelmError:  # a list at the top: not a values document
            try:
                data = helm.values_from_yaml("items:\n" + text)["items"]
            except helm.HelmError as e:
                raise ChartError(f"{path}: {_msg(e)}") from None
    if isinstance(data, dict):
        data = data["items"] if "items" in data and "kind" in data and str(data["kind"]).endswith("List") else [data]
    if not isinstance(data, list):
        raise ChartError(f"{path}: not a list of Kubernetes objects")
    for i, o in enumerate(data):
        if not isinstance(o, dict) or not {"apiVersion", "kind", "metadata"} <= o.keys():
            raise ChartError(f"{path}: item {i} is not a Kubernetes object (apiVersion, kind, metadata)")
    return data


# --- rendering --------------------------------------------------------------

def _render_raw(chart, values, opts, cfg=None):
    """Helm's render, with the options the SDK's C ABI takes (kube_version,
    api_versions, ... which helm_python's Chart.render does not pass on)."""
    values_json = None if values is None else json.dumps(values)
    if cfg is None:
        out = _native.call_string("helm_render", chart._raw(), values_json, json.dumps(opts))
    else:
        out = _native.call_string("helm_render_with_config", cfg._raw(), chart._raw(), values_json, json.dumps(opts))
    return json.loads(out)


# releaseutil.SplitManifests' separator.
_SEP = re.compile(r"(?:^|\s*\n)---\s*")


def render(chart_dir, values_files=(), sets=(), release="release-name", namespace="default", kube_version=None,
           api_versions=(), lookup_objects=None, is_upgrade=False):
    """Renders the chart as `helm template` (or, with lookup_objects, as an
    install or upgrade into a cluster holding those objects) would.
    Raises ChartError with Helm's message."""
    user = user_values(values_files, sets)
    try:
        helm.validate_release_name(release)
        chart = helm.Chart.load(chart_dir)
    except helm.HelmError as e:
        raise ChartError(_msg(e)) from None
    with chart:
        name = chart.name
        check_kube_version(chart.metadata.get("kubeVersion"), kube_version)
        opts = {"name": release, "namespace": namespace, "is_install": not is_upgrade, "is_upgrade": is_upgrade}
        if is_upgrade:
            opts["revision"] = 2
        if kube_version:
            opts["kube_version"] = kube_version
        if api_versions:
            opts["api_versions"] = list(api_versions)
        try:
            if lookup_objects is None:
                files = _render_raw(chart, user, opts)
            else:
                with _cluster(lookup_objects) as cfg:
                    files = _render_raw(chart, user, opts, cfg)
        except helm.HelmError as e:
            raise ChartError(_msg(e)) from None
    notes = files.pop(f"{name}/templates/NOTES.txt", "")
    manifests, texts = [], []
    for source in sorted(files):
        for doc in _SEP.split(files[source]):
            doc = doc.strip()
            if not doc:
                continue
            try:  # as Helm prints it (and installs it): the document, then a newline
                obj = helm.values_from_yaml(doc + "\n")
            except helm.HelmError as e:
                raise ChartError(f"YAML parse error on {source}: {_msg(e)}") from None
            texts.append((source, doc))
            if obj:  # comment-only documents have no object
                manifests.append({"source": source, "manifest": obj})
    return Rendered(manifests, notes, texts)


def lint(chart_dir, values_files=(), sets=(), strict=True, namespace=None, kube_version=None):
    """Helm's lint. Returns (passed, messages): messages are
    (severity name, path, text); passed as `helm lint [--strict]` decides
    (no error; with strict, no warning either)."""
    user = user_values(values_files, sets)
    try:
        report = helm.lint(chart_dir, user or None, strict=strict, namespace=namespace, kube_version=kube_version)
    except helm.HelmError as e:
        raise ChartError(_msg(e)) from None
    names = {0: "UNKNOWN", 1: "INFO", 2: "WARNING", 3: "ERROR"}
    messages = [(names.get(m["severity"], str(m["severity"])), m["path"], m["error"].strip())
                for m in report.get("messages", [])]
    worst = max((m["severity"] for m in report.get("messages", [])), default=0)
    passed = not report.get("errors") and worst < (2 if strict else 3)
    return passed, messages


# --- command line -----------------------------------------------------------

def _split_list(items):
    return [v.strip() for item in items for v in item.split(",") if v.strip()]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    for command in ("render", "lint"):
        p = sub.add_parser(command)
        p.add_argument("--chart", required=True)
        p.add_argument("--values", "-f", action="append", default=[])
        p.add_argument("--set", action="append", default=[])
        p.add_argument("--namespace", default=None if command == "lint" else "default")
        p.add_argument("--kube-version")
        if command == "render":
            p.add_argument("--release", default="release-name")
            p.add_argument("--api-versions", action="append", default=[])
            p.add_argument("--lookup-objects", help="objects lookup finds (YAML/JSON list or List)")
            p.add_argument("--upgrade", action="store_true", help=".Release.IsUpgrade (revision 2)")
            p.add_argument("--notes", action="store_true")
            p.add_argument("--output", choices=("yaml", "json"), default="yaml")
        else:
            p.add_argument("--strict", action="store_true")
    args = ap.parse_args(argv)
    try:
        if args.command == "lint":
            passed, messages = lint(args.chart, args.values, args.set, args.strict, args.namespace,
                                    args.kube_version)
            for severity, path, text in messages:
                print(f"[{severity}] {path}: {text}")
            print(f"1 chart(s) linted, {0 if passed else 1} chart(s) failed")
            return 0 if passed else 1
        objects = load_objects(args.lookup_objects) if args.lookup_objects else None
        r = render(args.chart, args.values, args.set, args.release, args.namespace, args.kube_version,
                   _split_list(args.api_versions), objects, args.upgrade)
    except ChartError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    if args.output == "json":
        json.dump({"manifests": r.manifests, "notes": r.notes} if args.notes else r.manifests, sys.stdout, indent=1)
        print()
    else:
        sys.stdout.write(r.yaml(notes=args.notes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
