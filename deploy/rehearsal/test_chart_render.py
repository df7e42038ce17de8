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
LWS_KIND = "leaderworkerset.x-k8s.io/v1/LeaderWorkerSet"
POOL_KIND = "inference.networking.k8s.io/v1/InferencePool"
# The value sets of N pipelines (docs/deploy.md, "N pipelines").
PLAIN2 = ["pipelines.replicas=2"]
LWS2 = ["pipelines.mode=leaderWorkerSet", "pipelines.replicas=2"]
ROUTER = ["router.enabled=true"]
STATIC = ["router.enabled=true", "router.discovery=static"]
POOL = ["inferencePool.enabled=true", "inferencePool.endpointPicker.name=prod-epp"]
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
                ((), ["internalAuth.enabled=false", "networkPolicy.enabled=false"], ()),
                ((), PLAIN2 + STATIC + POOL, [POOL_KIND]), ((), LWS2 + ROUTER + POOL, [LWS_KIND, POOL_KIND]),
                ((), LWS2 + STATIC + ["networkPolicy.gatewayFrom[0].namespaceSelector.matchLabels.a=b"], [LWS_KIND])]:
            for d in render(values, sets, api_versions=api).docs():
                errors = schema.validate(d)
                if errors is None:
                    self.assertEqual(d["kind"], "ServiceMonitor", "only custom resources go unvalidated")
                    continue
                checked += 1
                self.assertEqual(errors, [], f"{sets}: {d['kind']}/{d['metadata']['name']}")
        self.assertGreater(checked, 80)

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


def selected(r, selector):
    """The pod templates (with their workload) a label selector matches:
    Deployments', StatefulSets' and each LeaderWorkerSet's leader and
    worker templates."""
    out = []
    for d in r.docs():
        if d["kind"] in ("Deployment", "StatefulSet"):
            out.append((d["metadata"]["name"], d["spec"]["template"]))
        elif d["kind"] == "LeaderWorkerSet":
            t = d["spec"]["leaderWorkerTemplate"]
            out += [(d["metadata"]["name"] + "/leader", t["leaderTemplate"]),
                    (d["metadata"]["name"] + "/worker", t["workerTemplate"])]
    want = selector.get("matchLabels", selector)
    return [name for name, t in out if all(t["metadata"]["labels"].get(k) == v for k, v in want.items())]


def run_stage_script(c, env):
    """The LeaderWorkerSet stage's shell, run by /bin/sh as the kubelet
    would start it ($$ -> $, LWS's environment): the argv it execs."""
    script = c["command"][2].replace("$$", "$")
    script = script.replace('exec specline-stage', 'printf "%s\\n" specline-stage')
    import subprocess
    out = subprocess.run(["/bin/sh", "-ec", script, c["command"][3]] + c["args"], env=env,
                         capture_output=True, text=True, check=True).stdout
    return out.splitlines()


class PipelinesTest(TestCase):
    """N pipelines: as plain objects (one set per pipeline) and as a
    LeaderWorkerSet (a group per pipeline); the default stays one."""

    def names(self, r):
        return sorted((d["kind"], d["metadata"]["name"]) for d in r.docs())

    def test_one_pipeline_is_the_default(self):
        self.assertEqual(self.names(render(sets=["pipelines.replicas=1", "pipelines.mode=plain"])),
                         self.names(DEFAULTS))
        self.assertNotIn("specline.io/pipeline", json.dumps(DEFAULTS.docs()))
        self.assertFalse(docs_of(DEFAULTS, "LeaderWorkerSet") or docs_of(DEFAULTS, "InferencePool")
                         or [d for d in DEFAULTS.docs() if "router" in d["metadata"]["name"]])

    def test_two_plain_pipelines(self):
        r = render(sets=PLAIN2, api_versions=[SM_KIND], values=[values_file("serviceMonitor: {enabled: true}\n")])
        names = self.names(r)
        for i in (0, 1):
            for kind, comp in (("Deployment", "gateway"), ("Deployment", "scheduler"), ("StatefulSet", "stage"),
                               ("Service", "gateway"), ("Service", "scheduler"), ("Service", "stage")):
                self.assertIn((kind, f"prod-specline-{i}-{comp}"), names)
            self.assertIn(("ConfigMap", f"prod-specline-{i}"), names)
        self.assertIn(("Service", "prod-specline-gateway"), names, "the release-wide gateway Service")
        self.assertNotIn(("Deployment", "prod-specline-gateway"), names)
        for i in (0, 1):
            pj = json.loads(one(r, "ConfigMap", f"prod-specline-{i}")["data"]["pipeline.json"])["stages"]
            self.assertEqual(pj[0]["next"], pj[1]["data_advertise"])
            self.assertEqual(pj[1]["next"], f"tcp://prod-specline-{i}-scheduler.llm.svc.cluster.local:7200")
            self.assertTrue(pj[0]["data_advertise"].startswith(f"tcp://prod-specline-{i}-stage-0.prod-specline-{i}-stage."))
            gw = one(r, "Deployment", f"prod-specline-{i}-gateway")["spec"]["template"]["spec"]["containers"][0]
            self.assertIn(f"--scheduler=prod-specline-{i}-scheduler.llm.svc.cluster.local:50052", gw["args"])
            sched = one(r, "Deployment", f"prod-specline-{i}-scheduler")["spec"]["template"]["spec"]["containers"][0]
            self.assertTrue(all(f"prod-specline-{i}-stage-" in a for a in
                                next(a for a in sched["args"] if a.startswith("--stage-grpc=")).split(",")))
            self.assertEqual({e["valueFrom"]["configMapKeyRef"]["name"] for e in gw["env"]}, {f"prod-specline-{i}"})
        # Every workload and per-pipeline Service selects its own pipeline's pods only.
        for d in r.docs():
            if d["kind"] in ("Deployment", "StatefulSet"):
                self.assertEqual(selected(r, d["spec"]["selector"]), [d["metadata"]["name"]])
        for i in (0, 1):
            for comp in ("gateway", "scheduler", "stage"):
                svc = one(r, "Service", f"prod-specline-{i}-{comp}")
                self.assertEqual(selected(r, svc["spec"]["selector"]), [f"prod-specline-{i}-{comp}"])
        self.assertEqual(sorted(selected(r, one(r, "Service", "prod-specline-gateway")["spec"]["selector"])),
                         ["prod-specline-0-gateway", "prod-specline-1-gateway"])
        # The ServiceMonitor scrapes each pod once: the per-pipeline gateway
        # Services name no job and have no metrics port.
        sm = one(r, "ServiceMonitor", "prod-specline")["spec"]["selector"]
        self.assertEqual(sm["matchExpressions"], [{"key": "specline.io/job", "operator": "Exists"}])
        scraped = [d["metadata"]["name"] for d in docs_of(r, "Service") if "specline.io/job" in d["metadata"]["labels"]]
        self.assertEqual(sorted(scraped), ["prod-specline-0-scheduler", "prod-specline-0-stage",
                                           "prod-specline-1-scheduler", "prod-specline-1-stage", "prod-specline-gateway"])
        for i in (0, 1):
            ports = {p["name"] for p in one(r, "Service", f"prod-specline-{i}-gateway")["spec"]["ports"]}
            self.assertEqual(ports, {"grpc", "http"})
        hpa = render(sets=PLAIN2 + ["gateway.autoscaling.enabled=true"])
        self.assertEqual(sorted(h["spec"]["scaleTargetRef"]["name"] for h in docs_of(hpa, "HorizontalPodAutoscaler")),
                         ["prod-specline-0-gateway", "prod-specline-1-gateway"])

    def test_two_pipelines_as_a_leaderworkerset(self):
        self.assertFails(["needs the LeaderWorkerSet CRD (leaderworkerset.x-k8s.io/v1)"], sets=LWS2)
        r = render(sets=LWS2, api_versions=[LWS_KIND])
        self.assertFalse(docs_of(r, "Deployment") or docs_of(r, "StatefulSet"), "no plain workloads")
        lws = one(r, "LeaderWorkerSet", "prod-specline")
        self.assertEqual(lws["apiVersion"], "leaderworkerset.x-k8s.io/v1")
        spec = lws["spec"]
        self.assertEqual(spec["replicas"], 2)
        self.assertEqual(spec["startupPolicy"], "LeaderCreated")
        self.assertEqual(spec["rolloutStrategy"], {"type": "RollingUpdate", "rollingUpdateConfiguration":
                                                   {"maxUnavailable": 1, "maxSurge": 0}})
        self.assertEqual(spec["networkConfig"], {"subdomainPolicy": "Shared"})
        t = spec["leaderWorkerTemplate"]
        self.assertEqual(t["size"], 3, "stages + 1")
        self.assertEqual(t["restartPolicy"], "None")
        leader = t["leaderTemplate"]["spec"]
        gw, sched = leader["containers"]
        self.assertEqual((gw["name"], sched["name"]), ("gateway", "scheduler"))
        self.assertIn("--scheduler=127.0.0.1:50052", gw["args"], "the gateway dials its scheduler on the pod")
        self.assertIn("--stage-grpc=prod-specline-$(GROUP_INDEX)-1.prod-specline.llm.svc.cluster.local:50061,"
                      "prod-specline-$(GROUP_INDEX)-2.prod-specline.llm.svc.cluster.local:50061", sched["args"])
        self.assertIn({"name": "GROUP_INDEX", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.labels['leaderworkerset.sigs.k8s.io/group-index']"}}}, sched["env"])
        ports = [p["name"] for c in leader["containers"] for p in c["ports"]]
        self.assertEqual(len(ports), len(set(ports)), f"port names unique in the pod: {ports}")
        self.assertEqual(leader["terminationGracePeriodSeconds"], 45)
        # The stages wire themselves from what LWS injects: run the shell.
        stage = t["workerTemplate"]["spec"]["containers"][0]
        self.assertNotIn("--stage=$(POD_INDEX)", stage["args"])
        addr = {}
        for w in (1, 2):
            env = {"PATH": os.environ["PATH"], "LWS_LEADER_ADDRESS": "prod-specline-1.prod-specline.llm",
                   "LWS_GROUP_SIZE": "3", "LWS_WORKER_INDEX": str(w)}
            argv = run_stage_script(stage, env)
            self.assertEqual(argv[0], "specline-stage")
            flags = dict(a[2:].split("=", 1) for a in argv[1:] if "=" in a)
            self.assertEqual(flags["stage"], str(w - 1))
            self.assertEqual(argv[-len(stage["args"]):], stage["args"], "the chart's flags follow")
            addr[w] = flags
        self.assertEqual(addr[1]["data-advertise"], "tcp://prod-specline-1-1.prod-specline.llm:7100")
        self.assertEqual(addr[1]["next"], addr[2]["data-advertise"], "stage 0 sends to stage 1")
        self.assertEqual(addr[2]["next"], "tcp://prod-specline-1.prod-specline.llm:7200", "the last to its leader")
        pj = json.loads(one(r, "ConfigMap", "prod-specline")["data"]["pipeline.json"])
        self.assertEqual(pj, {"stages": [{"layers": "0:15"}, {"layers": "15:30"}]}, "layers only")
        # Services: the gateways and the two metrics jobs, over the groups.
        for name, want in (("prod-specline-gateway", ["prod-specline/leader"]),
                           ("prod-specline-scheduler", ["prod-specline/leader"]),
                           ("prod-specline-stage", ["prod-specline/worker"])):
            self.assertEqual(selected(r, one(r, "Service", name)["spec"]["selector"]), want, name)
        self.assertEqual(one(r, "Service", "prod-specline-scheduler")["spec"]["ports"],
                         [{"name": "metrics", "port": 9101, "targetPort": "sched-metrics", "protocol": "TCP"}])
        pdb = one(r, "PodDisruptionBudget", "prod-specline-gateway")
        self.assertEqual(selected(r, pdb["spec"]["selector"]), ["prod-specline/leader"])
        other = render(sets=LWS2 + ["pipelines.leaderWorkerSet.restartPolicy=RecreateGroupOnPodRestart"],
                       api_versions=[LWS_KIND])
        self.assertEqual(one(other, "LeaderWorkerSet", "prod-specline")["spec"]["leaderWorkerTemplate"]["restartPolicy"],
                         "RecreateGroupOnPodRestart")
        self.assertFails(["gateway.autoscaling scales gateway Deployments"], sets=LWS2 + [
            "gateway.autoscaling.enabled=true"], api_versions=[LWS_KIND])
        self.assertFails(["- at '/pipelines/mode'"], sets=["pipelines.mode=lws"])
        self.assertFails(["- at '/pipelines/replicas'"], sets=["pipelines.replicas=0"])

    def test_network_policies_of_the_groups(self):
        r = render(sets=LWS2 + ROUTER, api_versions=[LWS_KIND])
        pols = {p["metadata"]["name"]: p for p in docs_of(r, "NetworkPolicy")}
        self.assertEqual(sorted(pols), ["prod-specline-leader", "prod-specline-router", "prod-specline-stage"])
        leader = pols["prod-specline-leader"]["spec"]
        self.assertEqual(selected(r, leader["podSelector"]), ["prod-specline/leader"])
        by_port = {}
        for rule in leader["ingress"]:
            for p in rule["ports"]:
                by_port[p["port"]] = [x["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
                                      for x in rule.get("from", [])] or "everyone"
        self.assertEqual(by_port, {"grpc": "everyone", "http": "everyone", "sched-grpc": ["leader"], "data": ["stage"],
                                   "metrics": "everyone", "sched-metrics": "everyone"})


class RouterTest(TestCase):
    """vllm-router in front: Kubernetes service discovery (and its RBAC) or
    static worker URLs; its Service is the clients' entry point."""

    def router(self, r):
        d = one(r, "Deployment", "prod-specline-router")
        return d, d["spec"]["template"]["spec"], d["spec"]["template"]["spec"]["containers"][0]

    def list_flag(self, args, name):
        i = args.index(name)
        out = []
        for a in args[i + 1:]:
            if a.startswith("--"):
                break
            out.append(a)
        return out

    def test_service_discovery_over_the_gateways(self):
        for sets, api, component in ((PLAIN2 + ROUTER, [], "gateway"), (LWS2 + ROUTER, [LWS_KIND], "leader")):
            r = render(sets=sets, api_versions=api)
            _, pod_spec, c = self.router(r)
            self.assertEqual(c["command"], ["vllm-router"])
            args = c["args"]
            for want in ("--service-discovery", "--service-discovery-namespace=llm", "--service-discovery-port=8000",
                         "--policy=cache_aware", "--host=0.0.0.0", "--port=8000", "--prometheus-host=0.0.0.0",
                         "--prometheus-port=29000", "--health-check-endpoint=/health",
                         "--health-check-interval-secs=5"):
                self.assertIn(want, args, sets)
            selector = dict(kv.split("=", 1) for kv in self.list_flag(args, "--selector"))
            self.assertEqual(selector["app.kubernetes.io/component"], component)
            self.assertEqual(len(selected(r, {"matchLabels": selector})), 2 if component == "gateway" else 1,
                             "every pipeline's gateway pods (LWS: the leader template)")
            self.assertNotIn("--worker-urls", args)
            self.assertEqual(pod_spec["serviceAccountName"], "prod-specline-router")
            self.assertIs(pod_spec["automountServiceAccountToken"], True, "it needs its token to watch pods")
            sa = one(r, "ServiceAccount", "prod-specline-router")
            self.assertIs(sa["automountServiceAccountToken"], False, "only its pod mounts the token")
            role = one(r, "Role", "prod-specline-router")
            self.assertEqual(role["rules"], [{"apiGroups": [""], "resources": ["pods"],
                                              "verbs": ["get", "list", "watch"]}])
            rb = one(r, "RoleBinding", "prod-specline-router")
            self.assertEqual(rb["roleRef"], {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                             "name": "prod-specline-router"})
            self.assertEqual(rb["subjects"], [{"kind": "ServiceAccount", "name": "prod-specline-router",
                                               "namespace": "llm"}])
            svc = one(r, "Service", "prod-specline-router")
            self.assertEqual(svc["metadata"]["labels"]["specline.io/job"], "specline-router")
            self.assertEqual({p["name"]: p["port"] for p in svc["spec"]["ports"]}, {"http": 8000, "metrics": 29000})
            self.assertEqual(selected(r, svc["spec"]["selector"]), ["prod-specline-router"])
            self.assertEqual({k: c[k]["httpGet"]["path"] for k in ("startupProbe", "readinessProbe", "livenessProbe")},
                             {"startupProbe": "/liveness", "readinessProbe": "/readiness", "livenessProbe": "/liveness"})
        self.assertIn("router     prod-specline-router, vllm-router policy cache_aware, Kubernetes service discovery",
                      r.notes)

    def test_static_worker_urls(self):
        r = render(sets=PLAIN2 + STATIC)
        _, pod_spec, c = self.router(r)
        self.assertEqual(self.list_flag(c["args"], "--worker-urls"),
                         ["http://prod-specline-0-gateway.llm.svc.cluster.local:8000",
                          "http://prod-specline-1-gateway.llm.svc.cluster.local:8000"])
        self.assertNotIn("--service-discovery", c["args"])
        self.assertFalse(docs_of(r, "Role") or docs_of(r, "RoleBinding") or docs_of(r, "ServiceAccount",
                                                                                   "prod-specline-router"))
        self.assertEqual(pod_spec["serviceAccountName"], "prod-specline")
        self.assertNotIn("automountServiceAccountToken", pod_spec)
        r = render(sets=LWS2 + STATIC, api_versions=[LWS_KIND])
        self.assertEqual(self.list_flag(self.router(r)[2]["args"], "--worker-urls"),
                         ["http://prod-specline-0.prod-specline.llm.svc.cluster.local:8000",
                          "http://prod-specline-1.prod-specline.llm.svc.cluster.local:8000"],
                         "each group's leader, by its name under LWS's Service")
        r = render(sets=STATIC + ["router.workerUrls={http://a:8000,http://b:8000}", "router.policy=round_robin"])
        _, _, c = self.router(r)
        self.assertEqual(self.list_flag(c["args"], "--worker-urls"), ["http://a:8000", "http://b:8000"])
        self.assertIn("--policy=round_robin", c["args"])
        one_pipeline = render(sets=STATIC)
        self.assertEqual(self.list_flag(self.router(one_pipeline)[2]["args"], "--worker-urls"),
                         ["http://prod-specline-gateway.llm.svc.cluster.local:8000"])

    def test_refusals_and_the_network_policies(self):
        self.assertFails(["router.enabled needs gateway.httpPort"], sets=ROUTER + ["gateway.httpPort=0"])
        self.assertFails(["router.enabled with gateway.tlsSecret"], sets=ROUTER + ["gateway.tlsSecret=cert"])
        self.assertFails(["- at '/router/policy'"], sets=ROUTER + ["router.policy=fastest"])
        self.assertFails(["- at '/router/discovery'"], sets=ROUTER + ["router.discovery=dns"])
        # An API restricted to the ingress namespace still admits the router to the gateways.
        r = render(sets=PLAIN2 + ROUTER + ["networkPolicy.gatewayFrom[0].namespaceSelector.matchLabels.role=ingress"])
        gw = one(r, "NetworkPolicy", "prod-specline-gateway")["spec"]["ingress"][0]
        self.assertEqual([p.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/component")
                          for p in gw["from"]], [None, "router"])
        router = one(r, "NetworkPolicy", "prod-specline-router")["spec"]
        self.assertEqual(selected(r, router["podSelector"]), ["prod-specline-router"])
        self.assertEqual(router["ingress"][0]["from"], [{"namespaceSelector": {"matchLabels": {"role": "ingress"}}}])


class InferencePoolTest(TestCase):
    def test_pool_over_the_gateways(self):
        self.assertFails(["inferencePool.enabled needs the Gateway API Inference Extension's CRDs"], sets=POOL)
        self.assertFails(["inferencePool.endpointPicker.name"], sets=["inferencePool.enabled=true"],
                         api_versions=[POOL_KIND])
        for sets, api, want in ((PLAIN2 + POOL, [POOL_KIND], ["prod-specline-0-gateway", "prod-specline-1-gateway"]),
                                (LWS2 + POOL, [POOL_KIND, LWS_KIND], ["prod-specline/leader"])):
            r = render(sets=sets, api_versions=api)
            pool = one(r, "InferencePool", "prod-specline")
            self.assertEqual(pool["apiVersion"], "inference.networking.k8s.io/v1")
            self.assertEqual(sorted(selected(r, pool["spec"]["selector"])), want)
            self.assertEqual(pool["spec"]["targetPorts"], [{"number": 8000}], "the gateways' HTTP port, /metrics too")
            self.assertEqual(pool["spec"]["endpointPickerRef"], {"name": "prod-epp", "port": {"number": 9002},
                                                                 "failureMode": "FailClose"})


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

    def test_strict_lint_of_n_pipelines(self):
        """helm lint cannot be told the cluster's APIs; in its lint mode a
        template's `fail` is logged and the rest of the template still
        renders, so it parses the LeaderWorkerSet and the InferencePool
        too (as the broken copy below shows)."""
        for sets in (PLAIN2 + ROUTER, PLAIN2 + STATIC + POOL, LWS2 + ROUTER + POOL, LWS2 + STATIC,
                     LWS2 + ROUTER + ["networkPolicy.gatewayFrom[0].podSelector.matchLabels.a=b"]):
            passed, messages = helm_chart.lint(CHART, sets=sets, strict=True, namespace="llm")
            self.assertTrue(passed, f"{sets}: {messages}")
            self.assertEqual([m for m in messages if m[0] != "INFO"], [], sets)
        import shutil
        broken = os.path.join(TMP.name, "broken-chart")
        shutil.copytree(CHART, broken)
        for name, needle in (("leaderworkerset.yaml", "  leaderWorkerTemplate:\n"),
                             ("inferencepool.yaml", "  targetPorts:\n")):
            path = os.path.join(broken, "templates", name)
            with open(path) as f:
                text = f.read()
            self.assertIn(needle, text)
            with open(path, "w") as f:
                f.write(text.replace(needle, needle + "   bad: [\n", 1))
            passed, messages = helm_chart.lint(broken, sets=LWS2 + POOL, strict=True)
            self.assertFalse(passed, name)
            self.assertTrue(any(m[0] == "ERROR" and name in m[1] for m in messages), messages)
            with open(path, "w") as f:
                f.write(text)


if __name__ == "__main__":
    sys.exit(unittest_exit.run(__name__, sys.argv))
