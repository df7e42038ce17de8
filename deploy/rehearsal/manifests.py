"""The rendered chart as objects: kinds, names, pod templates and the label
matching Kubernetes does between Services, workloads and budgets."""
import json
import subprocess


def render(helm_render, chart, values_files=(), sets=(), release="specline", namespace="default",
           api_versions=()):
    """Runs helm-render (or helm-render compatible) and returns the manifests."""
    cmd = [helm_render, "--chart", chart, "--release", release, "--namespace", namespace,
           "--output", "json"]
    for v in values_files:
        cmd += ["--values", v]
    for s in sets:
        cmd += ["--set", s]
    if api_versions:
        cmd += ["--api-versions", ",".join(api_versions)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"helm-render failed: {r.stderr.strip()}")
    return Manifests(json.loads(r.stdout))


class Manifests:
    def __init__(self, rendered):
        if isinstance(rendered, dict):  # {"manifests": [...], "notes": ...}
            rendered = rendered["manifests"]
        self.docs = [r["manifest"] if "manifest" in r else r for r in rendered]

    def of_kind(self, kind):
        return [d for d in self.docs if d.get("kind") == kind]

    def get(self, kind, name):
        for d in self.of_kind(kind):
            if d["metadata"]["name"] == name:
                return d
        return None

    def workloads(self):
        """Deployments and StatefulSets: the things that make pods."""
        return self.of_kind("Deployment") + self.of_kind("StatefulSet")

    def pods_selected_by(self, selector):
        """Workloads whose pod template labels match a label selector."""
        return [w for w in self.workloads()
                if matches(selector, w["spec"]["template"]["metadata"].get("labels", {}))]


def matches(selector, labels):
    """matchLabels semantics (matchExpressions are not used by the chart)."""
    if "matchLabels" in selector:
        selector = selector["matchLabels"]
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def replicas(workload):
    return int(workload["spec"].get("replicas", 1))


def containers(workload):
    spec = workload["spec"]["template"]["spec"]
    return spec.get("initContainers", []), spec["containers"]
