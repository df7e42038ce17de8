"""The rendered chart as objects: kinds, names, pod templates and the label
matching Kubernetes does between Services, workloads and budgets."""


def render(chart, values_files=(), sets=(), release="specline", namespace="default", api_versions=(),
           lookup_objects=None, is_upgrade=False, kube_version=None):
    """Renders the chart with Helm (helm_chart.py) and returns the manifests;
    helm_chart.ChartError (a RuntimeError) with Helm's message on failure.
    lookup_objects: what `lookup` finds in the cluster (None: nothing, as
    with `helm template`)."""
    import helm_chart  # helm-python-sdk: only where something is rendered
    return Manifests(helm_chart.render(chart, values_files, sets, release=release, namespace=namespace,
                                       kube_version=kube_version, api_versions=api_versions,
                                       lookup_objects=lookup_objects, is_upgrade=is_upgrade).manifests)


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
        """Deployments, StatefulSets and the two pod templates of each
        LeaderWorkerSet (lws_workloads): the things that make pods."""
        return self.of_kind("Deployment") + self.of_kind("StatefulSet") + \
            [w for d in self.of_kind("LeaderWorkerSet") for w in lws_workloads(d)]

    def pods_selected_by(self, selector):
        """Workloads whose pod template labels match a label selector."""
        return [w for w in self.workloads()
                if matches(selector, w["spec"]["template"]["metadata"].get("labels", {}))]


def lws_workloads(lws):
    """A LeaderWorkerSet as the two workloads its controller makes: the
    leaders (one pod per group, <lws>-<g>) and the workers (size - 1 per
    group, <lws>-<g>-<w>), each shaped like a Deployment (kind
    LeaderWorkerSet, "role" leader or worker, "lws" the object; a selector
    of its template's labels, as the chart's Services select them)."""
    spec = lws["spec"]
    t = spec["leaderWorkerTemplate"]
    groups, size = int(spec.get("replicas", 1)), int(t.get("size", 1))
    out = []
    for role, template, count in (("leader", t.get("leaderTemplate") or t["workerTemplate"], groups),
                                  ("worker", t["workerTemplate"], groups * (size - 1))):
        labels = template.get("metadata", {}).get("labels", {})
        out.append({"kind": "LeaderWorkerSet", "role": role, "lws": lws,
                    "metadata": {"name": f'{lws["metadata"]["name"]}-{role}'},
                    "spec": {"replicas": count, "selector": {"matchLabels": dict(labels)}, "template": template}})
    return out


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


def selector_matches(selector, labels):
    """A LabelSelector (matchLabels and matchExpressions) against labels;
    an empty selector matches everything, as in a NetworkPolicy."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        present, value = e["key"] in labels, labels.get(e["key"])
        op = e["operator"]
        if (op == "In" and value not in e.get("values", [])) or \
           (op == "NotIn" and present and value in e.get("values", [])) or \
           (op == "Exists" and not present) or (op == "DoesNotExist" and present):
            return False
    return True


class Source:
    """Where a connection comes from, for admits(): a pod with `labels` in
    the release's namespace (same_namespace) or in a namespace with
    `namespace_labels`, at `ip` (dotted quad, for ipBlock peers)."""

    def __init__(self, labels=None, same_namespace=True, namespace_labels=None, ip=None):
        self.labels, self.same_namespace = labels or {}, same_namespace
        self.namespace_labels, self.ip = namespace_labels or {}, ip


def _in_cidr(ip, cidr):
    import ipaddress
    return ip is not None and ipaddress.ip_address(ip) in ipaddress.ip_network(cidr, strict=False)


def _peer_matches(peer, src):
    if "ipBlock" in peer:
        b = peer["ipBlock"]
        return _in_cidr(src.ip, b["cidr"]) and not any(_in_cidr(src.ip, x) for x in b.get("except", []))
    if "namespaceSelector" in peer:
        if not selector_matches(peer["namespaceSelector"], src.namespace_labels):
            return False
    elif not src.same_namespace:  # a podSelector alone: the policy's namespace
        return False
    return selector_matches(peer.get("podSelector"), src.labels)


def admits(m, workload, port, src):
    """Whether the NetworkPolicies of the rendered chart let `src` connect
    to TCP `port` (a number) of `workload`'s pods: open when no policy
    selects the pod, else when some ingress rule of a selecting policy
    matches the port (named ports resolved on the pod) and the source."""
    labels = workload["spec"]["template"]["metadata"].get("labels", {})
    named = {cp["name"]: cp["containerPort"] for c in containers(workload)[1] for cp in c.get("ports", [])}
    policies = [p for p in m.of_kind("NetworkPolicy")
                if selector_matches(p["spec"]["podSelector"], labels)
                and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])]
    if not policies:
        return True
    for p in policies:
        for rule in p["spec"].get("ingress", []):
            ports = rule.get("ports")
            if ports:
                ok = False
                for rp in ports:
                    if rp.get("protocol", "TCP") != "TCP":
                        continue
                    number = named.get(rp["port"], rp["port"]) if "port" in rp else None
                    if number is None or (isinstance(number, int) and number <= port <= rp.get("endPort", number)):
                        ok = True
                if not ok:
                    continue
            peers = rule.get("from")
            if not peers or any(_peer_matches(peer, src) for peer in peers):
                return True
    return False
