#!/usr/bin/env python3
"""The Helm chart deploy/helm/specline rendered by Helm itself (helm_chart.py,
helm-python-sdk): how our chart takes its values (files in order, --set,
null, lists, types), what Helm refuses (values.schema.json, kubeVersion,
required/fail in our templates, the ServiceMonitor without its API), NOTES,
`helm template`'s output, the lookup path of an upgrade, and that the
objects pass the Kubernetes API types, mount the cluster secret and are
fenced by the NetworkPolicies. Needs no built binaries (check_chart.py
checks the chart against them).

    ~/.cache/specline/helm-venv/bin/python test_chart_render.py [unittest options]

Exit status: 0 all passed, 1 a test failed, 77 (ctest's SKIP_RETURN_CODE)
none failed but one was skipped (the Kubernetes API types not fetched).
"""
import base64
import hashlib
import json
import os
import sys
import tempfile
import threading
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import helm_chart  # noqa: E402
import k8s_schema  # noqa: E402
import unittest_exit  # noqa: E402
from helm_chart import ChartError  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CHART = os.path.join(REPO, "deploy", "helm", "specline")
GPU = os.path.join(CHART, "values-gpu.yaml")
SM_KIND = "monitoring.coreos.com/v1/ServiceMonitor"
SECRET = "prod-specline-cluster-secret"
WORKLOADS = {"gateway": ("Deployment", "prod-specline-gateway"), "scheduler": ("Deployment", "prod-specline-scheduler"),
             "stage": ("StatefulSet", "prod-specline-stage")}


def render(values=(), sets=(), release="prod", namespace="llm", **kw):
    return helm_chart.render(CHART, values, sets, release=release, namespace=namespace, **kw)


def docs_of(r, kind, name=None):
    return [d for d in r.docs() if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(r, kind, name):
    found = docs_of(r, kind, name)
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def pod(r, component):
    return one(r, *WORKLOADS[component])["spec"]["template"]


def container(r, component):
    return pod(r, component)["spec"]["containers"][0]


DEFAULTS = TMP = None


def setUpModule():
    global DEFAULTS, TMP
    TMP = tempfile.TemporaryDirectory(prefix="test_chart_render-")
    DEFAULTS = render()


def tearDownModule():
    TMP.cleanup()


def values_file(text):
    f = tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=TMP.name, delete=False)
    with f:
        f.write(text)
    return f.name


class TestCase(unittest.TestCase):
    def assertFails(self, needles, *args, **kw):
        """The render fails and Helm's message holds every needle."""
        with self.assertRaises(ChartError, msg=f"{args} {kw}: rendered, expected an error") as cm:
            render(*args, **kw)
        for n in needles:
            self.assertIn(n, str(cm.exception))
        return str(cm.exception)


class OutputTest(TestCase):
    """Go: TestDefaultRender (what of it is about our chart)."""

    def test_defaults_as_helm_template(self):
        r = render(release="release-name", namespace="default")
        self.assertEqual(sorted((d["kind"], d["metadata"]["name"]) for d in r.docs()), sorted([
            ("ConfigMap", "release-name-specline"),
            ("Deployment", "release-name-specline-gateway"), ("Deployment", "release-name-specline-scheduler"),
            ("NetworkPolicy", "release-name-specline-gateway"), ("NetworkPolicy", "release-name-specline-scheduler"),
            ("NetworkPolicy", "release-name-specline-stage"),
            ("PersistentVolumeClaim", "release-name-specline-models"),
            ("PodDisruptionBudget", "release-name-specline-gateway"),
            ("Secret", "release-name-specline-cluster-secret"),
            ("Service", "release-name-specline-gateway"), ("Service", "release-name-specline-scheduler"),
            ("Service", "release-name-specline-stage"),
            ("ServiceAccount", "release-name-specline"), ("StatefulSet", "release-name-specline-stage")]))
        # Templates that render to whitespace only (servicemonitor, HPA, the
        # stage PDB, off by default) give no document; partials give none.
        self.assertEqual({m["source"].split("/")[-1] for m in r.manifests} & {
            "servicemonitor.yaml", "gateway-hpa.yaml", "stage-pdb.yaml", "_helpers.tpl", "NOTES.txt"}, set())
        for m in r.manifests:
            self.assertTrue(m["source"].startswith("specline/templates/"), m["source"])

    def test_every_object_has_the_partials_labels(self):
        want = {"helm.sh/chart": "specline-0.1.0", "app.kubernetes.io/name": "specline",
                "app.kubernetes.io/instance": "prod", "app.kubernetes.io/version": "0.1.0",
                "app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/part-of": "specline"}
        for d in DEFAULTS.docs():
            labels = d["metadata"].get("labels", {})
            self.assertEqual({k: labels.get(k) for k in want}, want, f"{d['kind']}/{d['metadata']['name']}")

    def test_release_named_like_the_chart_is_not_repeated(self):
        r = render(release="specline")
        self.assertTrue(docs_of(r, "Deployment", "specline-gateway"), [d["metadata"]["name"] for d in r.docs()])

    def test_to_yaml_blocks_keep_the_values(self):
        values = helm_chart.helm.Chart.load(CHART).values
        for component in ("gateway", "scheduler", "stage"):
            c = container(DEFAULTS, component)
            self.assertEqual(c["resources"], values[component]["resources"], component)
            self.assertEqual(c["securityContext"], values["securityContext"], component)
            self.assertEqual(pod(DEFAULTS, component)["spec"]["securityContext"], values["podSecurityContext"])

    def test_yaml_output_is_helm_templates(self):
        r = render(sets=["serviceMonitor.enabled=true"], api_versions=[SM_KIND])
        text = r.yaml(notes=True)
        blocks = text.split("---\n")[1:]
        self.assertEqual(len(blocks), len(r.texts))
        for block, m in zip(blocks, r.manifests):
            self.assertTrue(block.startswith(f"# Source: {m['source']}\n"), block[:80])
            self.assertEqual(helm_chart.helm.values_from_yaml(block.split("# NOTES:")[0]), m["manifest"])
        notes = text.split("# NOTES:\n", 1)[1]
        self.assertTrue(all(line.startswith("#") for line in notes.splitlines()))
        self.assertIn("# specline 0.1.0 is starting as release prod in namespace llm:", notes)


class ValuesTest(TestCase):
    """Go: TestValuesFilesMergeAndNullDeletion, TestCoalesce, TestSetValues,
    TestInvalidValuesFile (on our chart's values)."""

    def test_values_files_merge_in_order(self):
        extra = values_file("pipeline: {stages: 3}\n"
                            "stage:\n  resources: {limits: null}\n  nodeSelector: {zone: a}\n"
                            "  tolerations: [{key: dedicated, operator: Exists}]\n")
        r = render([GPU, extra], api_versions=[SM_KIND])
        sts = one(r, *WORKLOADS["stage"])
        self.assertEqual(sts["spec"]["replicas"], 3, "the later file wins")
        spec = sts["spec"]["template"]["spec"]
        self.assertEqual(spec["containers"][0]["resources"], {"requests": {"cpu": "2", "memory": "16Gi"},
                                                              "limits": {"nvidia.com/gpu": 1}},
                         "null deletes the file's limits (the chart adds the GPU); its requests stay")
        self.assertEqual(spec["nodeSelector"], {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "zone": "a"},
                         "maps merge across files")
        self.assertEqual(spec["tolerations"], [{"key": "dedicated", "operator": "Exists"}], "lists are replaced")
        pipeline = json.loads(docs_of(r, "ConfigMap")[0]["data"]["pipeline.json"])
        self.assertEqual(len(pipeline["stages"]), 3)
        self.assertEqual(pipeline["stages"][0]["layers"], "0:11", "layers: 32 from the GPU file")
        self.assertEqual(container(r, "scheduler")["resources"]["limits"], {"memory": "16Gi", "nvidia.com/gpu": 1})
        self.assertEqual(container(r, "gateway")["resources"], container(DEFAULTS, "gateway")["resources"],
                         "untouched defaults survive")

    def test_set_after_files_with_helm_types(self):
        r = render([GPU], [
            "pipeline.stages=2,gateway.replicas=3", "image.tag=0123", "internalAuth.enabled=false",
            "gateway.extraArgs={--a=1,--b=two}", r"stage.nodeSelector.kubernetes\.io/arch=amd64",
            "scheduler.tolerations[0].key=gpu", "scheduler.tolerations[0].operator=Exists",
            "gateway.resources.limits=null", "model.download.enabled=true", "model.download.url=http://h/m?a=b",
            "gateway.autoscaling.enabled=false", "serviceMonitor.enabled=false"])
        self.assertEqual(one(r, *WORKLOADS["stage"])["spec"]["replicas"], 2, "--set wins over -f")
        self.assertEqual(one(r, *WORKLOADS["gateway"])["spec"]["replicas"], 3, "an integer (the schema wants one)")
        self.assertEqual(container(r, "gateway")["image"], "ghcr.io/specline/specline:0123", "0123 stays a string")
        self.assertFalse(docs_of(r, "Secret"), "false is a boolean")
        self.assertEqual(container(r, "gateway")["args"][-2:], ["--a=1", "--b=two"], "{a,b} is a list")
        self.assertEqual(pod(r, "stage")["spec"]["nodeSelector"],
                         {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "kubernetes.io/arch": "amd64"},
                         "an escaped dot stays in the key; maps merge with the file's")
        self.assertEqual(pod(r, "scheduler")["spec"]["tolerations"], [{"key": "gpu", "operator": "Exists"}],
                         "two --set build one list element")
        self.assertEqual(container(r, "gateway")["resources"], {"requests": {"cpu": "500m", "memory": "512Mi"}},
                         "null deletes a default")
        env = pod(r, "stage")["spec"]["initContainers"][0]["env"]
        self.assertIn({"name": "MODEL_URL", "value": "http://h/m?a=b"}, env, "'=' inside a value")

    def test_bad_values_file_or_set(self):
        bad = values_file("pipeline: [1\n")
        self.assertFails([f"failed to parse {bad}"], [bad])
        self.assertFails(["failed parsing --set data", "novalue"], sets=["novalue"])


class SchemaTest(TestCase):
    """Go: TestSchemaValidation, on values.schema.json."""
    HEAD = "values don't meet the specifications of the schema(s) in the following chart(s):\nspecline:\n"

    def test_schema_is_enforced_with_helms_message(self):
        self.assertFails([self.HEAD, "- at '/gateway/replicas'", "want integer"], sets=["gateway.replicas=two"])
        self.assertFails([self.HEAD, "- at '/gateway/grpcPort'", "minimum"], sets=["gateway.grpcPort=0"])
        self.assertFails([self.HEAD, "/model", "file"], sets=["model.file="])
        self.assertFails([self.HEAD, "podSelectr"], sets=["networkPolicy.gatewayFrom[0].podSelectr.a=b"])
        self.assertFails([self.HEAD, "- at '/stage/device'"], [values_file("stage: {device: tpu}\n")])
        self.assertFails([self.HEAD, "missing property 'model'"], sets=["model=null"])


class CapabilitiesTest(TestCase):
    """Go: TestAPIVersionsGate, TestKubeVersionConstraint."""

    def test_servicemonitor_needs_its_api(self):
        msg = "serviceMonitor.enabled needs the Prometheus Operator CRDs (monitoring.coreos.com/v1)"
        on = ["serviceMonitor.enabled=true"]
        self.assertFails(["execution error at (specline/templates/servicemonitor.yaml", msg], sets=on)
        self.assertFails([msg], sets=on, api_versions=["monitoring.coreos.com/v1"])  # the Kind is asked for
        r = render(sets=on, api_versions=["example.com/v1", SM_KIND])
        self.assertEqual(one(r, "ServiceMonitor", "prod-specline")["apiVersion"], "monitoring.coreos.com/v1")
        self.assertFalse(docs_of(render(api_versions=[SM_KIND]), "ServiceMonitor"), "off unless enabled")

    def test_kube_version(self):
        self.assertEqual(helm_chart.helm.Chart.load(CHART).metadata["kubeVersion"], ">=1.28.0-0")
        self.assertFails(["chart requires kubeVersion: >=1.28.0-0 which is incompatible with Kubernetes v1.27.9"],
                         kube_version="1.27.9")
        for ok in ("1.28.0", "v1.30.2", "v1.28.3-gke.1286000", None):  # None: Helm's default
            self.assertTrue(render(kube_version=ok).docs(), ok)


class TemplateFailureTest(TestCase):
    """Go: TestRequired, TestFailInPartial (our templates' required/fail)."""

    def test_required_download_url(self):
        self.assertFails(["execution error at (specline/templates/",
                          "model.download.url is required when model.download.enabled"],
                         sets=["model.download.enabled=true"])
        r = render(sets=["model.download.enabled=true", "model.download.url=https://example.com/m.gguf"])
        self.assertEqual(pod(r, "stage")["spec"]["initContainers"][0]["name"], "fetch-model")

    def test_fail_in_a_partial(self):
        self.assertFails(["execution error at (specline/templates/", "pipeline.partition has 2 ranges for 3 stages"],
                         sets=["pipeline.stages=3", "pipeline.partition={0:10,10:30}"])
        self.assertFails(["pipeline.stages (31) exceeds pipeline.layers (30)"], sets=["pipeline.stages=31"])


class NotesTest(TestCase):
    """Go: TestNotes."""

    def test_notes(self):
        self.assertFalse([m for m in DEFAULTS.manifests if "NOTES" in m["source"]], "NOTES.txt is no manifest")
        n = DEFAULTS.notes
        self.assertTrue(n.startswith("specline 0.1.0 is starting as release prod in namespace llm:"), n[:100])
        self.assertIn("kubectl -n llm port-forward svc/prod-specline-gateway 50051:50051", n)
        self.assertIn("Metrics: no ServiceMonitor", n)
        self.assertIn("cluster secret in Secret prod-specline-cluster-secret", n)
        r = render([GPU], api_versions=[SM_KIND], release="r1", namespace="ns1")
        self.assertNotIn("Metrics: no ServiceMonitor", r.notes)
        self.assertIn("stages     4 x r1-specline-stage on cuda, layers 0:8,8:16,16:24,24:32", r.notes)
        self.assertIn("(2-8 replicas)", r.notes, "the HPA's range")


class LookupTest(TestCase):
    """Go: TestLookupObjects: `lookup` sees the cluster's objects on an
    upgrade (a stand-in API server, Helm's own lookup code)."""

    def live(self, namespace="llm", name=SECRET, key="secret", value=b"x" * 48):
        return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": name, "namespace": namespace}, "data": {key: base64.b64encode(value).decode()}}

    def secret_data(self, r):
        return one(r, "Secret", SECRET)["data"]["secret"]

    def test_upgrade_keeps_the_clusters_secret(self):
        live = self.live()
        up = render(lookup_objects=[live], is_upgrade=True)
        self.assertEqual(self.secret_data(up), live["data"]["secret"])
        want = hashlib.sha256(live["data"]["secret"].encode()).hexdigest()
        for c in WORKLOADS:
            self.assertEqual(pod(up, c)["metadata"]["annotations"]["checksum/cluster-secret"], want, c)
        for other in (self.live(namespace="other"), self.live(name="another"), dict(self.live(), kind="ConfigMap")):
            self.assertNotEqual(self.secret_data(render(lookup_objects=[other])), live["data"]["secret"], other)
        self.assertNotEqual(self.secret_data(render()), self.secret_data(DEFAULTS), "each install draws anew")

    def test_existing_secret_seen_by_lookup(self):
        sets = ["internalAuth.existingSecret=mine", "internalAuth.secretKey=token"]
        r = render(sets=sets)
        self.assertFalse(any("checksum/cluster-secret" in pod(r, c)["metadata"]["annotations"] for c in WORKLOADS))
        live = self.live(name="mine", key="token")
        r = render(sets=sets, lookup_objects=[live])
        want = hashlib.sha256(live["data"]["token"].encode()).hexdigest()
        for c in WORKLOADS:
            self.assertEqual(pod(r, c)["metadata"]["annotations"]["checksum/cluster-secret"], want, c)

    def test_objects_file_and_stand_in(self):
        path = values_file("- apiVersion: v1\n  kind: Secret\n  metadata: {name: one, namespace: a}\n"
                           "- apiVersion: v1\n  kind: Secret\n  metadata: {name: two, namespace: b}\n")
        objects = helm_chart.load_objects(path)
        self.assertEqual([o["metadata"]["name"] for o in objects], ["one", "two"])
        with self.assertRaisesRegex(ChartError, "item 0"):
            helm_chart.load_objects(values_file("- just a string\n"))
        server = helm_chart._StandInAPI(objects)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            def get(path):
                try:
                    with urllib.request.urlopen(base + path, timeout=10) as resp:
                        return json.load(resp)
                except urllib.error.HTTPError as e:
                    return e.code
            self.assertEqual(get("/api/v1/namespaces/a/secrets/one")["metadata"]["name"], "one")
            self.assertEqual(get("/api/v1/namespaces/b/secrets/one"), 404)
            self.assertEqual(len(get("/api/v1/namespaces/b/secrets")["items"]), 1)
            self.assertEqual(get("/api/v1/secrets")["kind"], "SecretList")
            self.assertEqual(len(get("/api/v1/secrets")["items"]), 2)
            self.assertIn("secrets", [r["name"] for r in get("/api/v1")["resources"]])
        finally:
            server.shutdown()
            server.server_close()


class ChartObjectsTest(TestCase):
    """Formerly tests/deploy_test.cc Deploy.Chart*: the objects pass the
    Kubernetes API types, the cluster secret reaches every workload, the
    NetworkPolicies admit only the release to the internal ports."""

    def test_objects_pass_the_kubernetes_api_types(self):
        if not k8s_schema.models_dir():
            self.skipTest(k8s_schema.SKIP_REASON)
        schema = k8s_schema.Schema(k8s_schema.models_dir())
        checked = 0
        for values, sets, api in [
                ((), (), ()), ([GPU], (), [SM_KIND]),
                ((), ["internalAuth.existingSecret=mine",
                      "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.a=b"], ()),
                ((), ["internalAuth.enabled=false", "networkPolicy.enabled=false"], ())]:
            for d in render(values, sets, api_versions=api).docs():
                errors = schema.validate(d)
                if errors is None:
                    self.assertEqual(d["kind"], "ServiceMonitor", "only custom resources go unvalidated")
                    continue
                checked += 1
                self.assertEqual(errors, [], f"{sets}: {d['kind']}/{d['metadata']['name']}")
        self.assertGreater(checked, 40)

    def test_cluster_secret_on_every_workload(self):
        secret = one(DEFAULTS, "Secret", SECRET)
        value = base64.b64decode(secret["data"]["secret"]).decode()
        self.assertTrue(len(value) == 48 and value.isalnum(), "48 alphanumerics (the binaries refuse < 32)")
        for component in WORKLOADS:
            spec = pod(DEFAULTS, component)["spec"]
            vols = [v for v in spec["volumes"] if v.get("secret", {}).get("secretName") == SECRET]
            self.assertEqual(len(vols), 1, component)
            self.assertEqual(vols[0]["secret"]["items"], [{"key": "secret", "path": "secret"}], component)
            c = spec["containers"][0]
            mounts = [m for m in c["volumeMounts"] if m["name"] == vols[0]["name"]]
            self.assertEqual(len(mounts), 1, component)
            self.assertTrue(mounts[0].get("readOnly"), component)
            flags = [a for a in c["args"] if a.startswith("--cluster-secret-file=")]
            self.assertEqual(flags, [f"--cluster-secret-file={mounts[0]['mountPath']}/secret"], component)
        off = render(sets=["internalAuth.enabled=false"])
        self.assertFalse(docs_of(off, "Secret"))
        self.assertNotIn("cluster-secret", json.dumps(off.docs()))

    def test_cors_origins_only_when_set(self):
        args = container(DEFAULTS, "gateway")["args"]
        self.assertFalse([a for a in args if a.startswith("--cors-origins")], "off by default")
        on = render(sets=["gateway.corsOrigins=https://app.example\\,http://localhost:3000"])
        self.assertIn("--cors-origins=https://app.example,http://localhost:3000",
                      container(on, "gateway")["args"])

    def test_network_policies_admit_only_the_release_to_internal_ports(self):
        policies = docs_of(DEFAULTS, "NetworkPolicy")
        self.assertEqual(len(policies), 3)
        release = {"app.kubernetes.io/name": "specline", "app.kubernetes.io/instance": "prod"}
        for component in WORKLOADS:
            labels = pod(DEFAULTS, component)["metadata"]["labels"]
            mine = [p for p in policies if p["spec"]["podSelector"].get("matchLabels")
                    and all(labels.get(k) == v for k, v in p["spec"]["podSelector"]["matchLabels"].items())]
            self.assertEqual(len(mine), 1, f"{component}: selected by one NetworkPolicy")
            self.assertEqual(mine[0]["spec"]["policyTypes"], ["Ingress"])
            open_ports = set()
            for rule in mine[0]["spec"]["ingress"]:
                ports = {p["port"] for p in rule.get("ports", [])}
                self.assertTrue(ports, f"{component}: a rule without ports admits every port")
                if "from" not in rule:
                    open_ports |= ports
                    continue
                for peer in rule["from"]:  # the release's own pods, in its namespace
                    self.assertEqual(list(peer), ["podSelector"], f"{component}: {peer}")
                    ml = peer["podSelector"].get("matchLabels", {})
                    self.assertEqual({k: ml.get(k) for k in release}, release, f"{component}: {peer}")
                    self.assertIn(ml.get("app.kubernetes.io/component"), WORKLOADS, f"{component}: {peer}")
            want = {"grpc", "http", "metrics"} if component == "gateway" else {"metrics"}
            self.assertEqual(open_ports, want, component)
        self.assertFalse(docs_of(render(sets=["networkPolicy.enabled=false"]), "NetworkPolicy"))


class LintTest(TestCase):
    """helm lint --strict on the value sets users start from; and that
    lint sees a mistake, so that a pass means something."""

    def test_strict_lint(self):
        for values, sets in [((), ()), ([GPU], ()), ((), ["internalAuth.existingSecret=mine",
                                                         "gateway.probe=http", "gateway.tlsSecret=cert"])]:
            passed, messages = helm_chart.lint(CHART, values, sets, strict=True, namespace="llm")
            self.assertTrue(passed, f"{values} {sets}: {messages}")
            self.assertEqual([m for m in messages if m[0] != "INFO"], [], f"{values} {sets}")
        passed, messages = helm_chart.lint(CHART, sets=["stage.device=tpu"], strict=True)
        self.assertFalse(passed)
        self.assertTrue(any(m[0] == "ERROR" and "/stage/device" in m[2] for m in messages), messages)


if __name__ == "__main__":
    sys.exit(unittest_exit.run(__name__, sys.argv))
