#!/usr/bin/env python3
"""Renders the chart for the value sets users start from (defaults, the
4-stage GPU example, an explicit partition with auth/TLS and a PVC of their
own, a locked-down internal plane with an existing cluster secret) and runs
the structural checks on each against the built binaries; validates every
built-in object against the Kubernetes API types; then checks what each set
must produce (the pipeline wiring, the cluster secret on every workload, what
the NetworkPolicies admit) and that bad values fail to render with a message
naming the value. Renders with Helm itself (helm_chart.py: helm-python-sdk),
so run it with the Helm venv's python:

    ~/.cache/specline/helm-venv/bin/python check_chart.py BIN_DIR [unittest options, e.g. -k secret]

A unittest suite. Exit status: 0 when every test passed, 1 when one failed,
77 (ctest's SKIP_RETURN_CODE) when none failed but one was skipped, e.g. the
schema validation without the Kubernetes API types, so a check that could
not run is reported as skipped, never as passed.
"""
import base64
import copy
import hashlib
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chart_checks  # noqa: E402
import helm_chart  # noqa: E402,F401  (fails at once, with the fix, without helm-python-sdk)
import k8s_schema  # noqa: E402
import unittest_exit  # noqa: E402
import manifests  # noqa: E402
from manifests import Source, admits  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CHART = os.path.join(REPO, "deploy", "helm", "specline")
RULES = os.path.join(REPO, "deploy", "prometheus", "specline-rules.yaml")
MONITORING = ["monitoring.coreos.com/v1", "monitoring.coreos.com/v1/ServiceMonitor"]
LWS_API = ["leaderworkerset.x-k8s.io/v1/LeaderWorkerSet"]
POOL_API = ["inference.networking.k8s.io/v1/InferencePool"]
SECRET_DIR = "/var/run/secrets/specline/cluster"
SECRET_FLAG = f"--cluster-secret-file={SECRET_DIR}/secret"
COMPONENTS = {"gateway": ("Deployment", "-gateway"), "scheduler": ("Deployment", "-scheduler"),
              "stage": ("StatefulSet", "-stage")}

BIN_DIR = None  # from the command line


def render(values=(), sets=(), api=(), lookup=None):
    """The chart as release "prod" in namespace "llm"; `lookup`: objects the
    cluster already has (Helm's lookup finds them), as on an upgrade."""
    return manifests.render(CHART, values, sets, release="prod", namespace="llm", api_versions=api,
                            lookup_objects=lookup, is_upgrade=lookup is not None)


def workload(m, component):
    kind, suffix = COMPONENTS[component]
    return next(d for d in m.of_kind(kind) if d["metadata"]["name"].endswith(suffix))


def container(m, kind, suffix):
    w = next(d for d in m.of_kind(kind) if d["metadata"]["name"].endswith(suffix))
    return w, w["spec"]["template"]["spec"]["containers"][0]


def flag(c, name):
    return next((a.split("=", 1)[1] for a in c["args"] if a.startswith(f"--{name}=")), None)


def port(w, name):
    return next(p["containerPort"] for c in manifests.containers(w)[1] for p in c["ports"] if p["name"] == name)


def pod_labels(w):
    return w["spec"]["template"]["metadata"]["labels"]


CASES = {}


def setUpModule():
    CASES.update({
        "defaults": render(),
        "gpu": render([os.path.join(CHART, "values-gpu.yaml")], api=MONITORING),
        "custom": render(sets=["pipeline.stages=3", "pipeline.partition={0:10,10:20,20:30}",
                               "gateway.authSecret=tok", "gateway.tlsSecret=cert",
                               "gateway.cacheShareGroups.team={alice,bob}",
                               "modelCache.existingClaim=shared-models", "model.tokenizer=tok/tokenizer.json",
                               "gateway.maxTokensPerMinutePerPrincipal=2000000", "gateway.metricsPerPrincipal=true",
                               "scheduler.admission=fifo", "scheduler.maxKvBlocksPerTenant=512"]),
        # Probes on the OpenAI API's GET /health, with TLS; and no HTTP port.
        "http-probe": render(sets=["gateway.probe=http", "gateway.tlsSecret=cert"]),
        "no-http": render(sets=["gateway.httpPort=0"]),
        # An operator's own secret, Prometheus only from "monitoring", clients
        # only from the ingress controller's namespace.
        "locked": render(sets=["internalAuth.existingSecret=specline-internal", "internalAuth.secretKey=token",
                               "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team=monitoring",
                               "networkPolicy.gatewayFrom[0].namespaceSelector.matchLabels.role=ingress"]),
        # N pipelines (docs/deploy.md, "N pipelines"): plain objects behind
        # the router with static URLs and an InferencePool; a LeaderWorkerSet
        # behind the router with service discovery, scraped, the API locked
        # to an ingress namespace.
        "plain2": render(sets=["pipelines.replicas=2", "router.enabled=true", "router.discovery=static",
                               "router.policy=kv_aware",
                               "serviceMonitor.enabled=true", "inferencePool.enabled=true",
                               "inferencePool.endpointPicker.name=epp"], api=MONITORING + POOL_API),
        "lws2": render(sets=["pipelines.mode=leaderWorkerSet", "pipelines.replicas=2", "router.enabled=true",
                             "router.policy=kv_aware",
                             "serviceMonitor.enabled=true",
                             "networkPolicy.gatewayFrom[0].namespaceSelector.matchLabels.role=ingress"],
                       api=MONITORING + LWS_API),
    })


class Check(unittest.TestCase):
    def expect(self, cond, what):
        """A check that reports and goes on (the suite lists every failure)."""
        with self.subTest(what):
            self.assertTrue(cond, what)


class StructureTest(Check):
    def test_structural_checks_against_the_binaries(self):
        jobs = chart_checks.rule_job_names(RULES)
        for name, m in CASES.items():
            errors = chart_checks.check(m, BIN_DIR, jobs if m.of_kind("ServiceMonitor") else [],
                                        existing_claims=["shared-models"],
                                        existing_secrets=["tok", "cert", "specline-internal"])
            self.expect(not errors, f"{name}:\n  " + "\n  ".join(errors))


class SchemaTest(Check):
    """Every built-in object against the Kubernetes API types."""

    @classmethod
    def setUpClass(cls):
        if not k8s_schema.models_dir():
            raise unittest.SkipTest(k8s_schema.SKIP_REASON)
        cls.schema = k8s_schema.Schema(k8s_schema.models_dir())

    def test_rendered_objects_are_valid(self):
        kinds = set()
        for name, m in CASES.items():
            for doc in m.docs:
                errors = self.schema.validate(doc)
                if errors is None:
                    self.expect(doc["kind"] == "ServiceMonitor", f"{name}: {doc['kind']} not validated")
                    continue
                kinds.add(doc["kind"])
                for e in errors:
                    self.expect(False, f"{name}: {doc['metadata']['name']}: {e}")
        for kind in ("Deployment", "StatefulSet", "Service", "ConfigMap", "Secret", "NetworkPolicy",
                     "PodDisruptionBudget", "HorizontalPodAutoscaler", "PersistentVolumeClaim", "ServiceAccount",
                     "Role", "RoleBinding", "LeaderWorkerSet", "InferencePool"):
            self.expect(kind in kinds, f"no {kind} was validated")

    def test_validator_sees_mistakes(self):
        """So that a pass above means something."""
        d = CASES["defaults"]
        broken = copy.deepcopy(container(d, "StatefulSet", "-stage")[0])
        broken["spec"]["podManagmentPolicy"] = "Parallel"
        broken["spec"]["replicas"] = "2"
        del broken["spec"]["template"]["spec"]["containers"][0]["name"]
        broken["spec"]["template"]["spec"]["volumes"][-1]["secret"]["defaultMode"] = "0440"
        found = " ".join(self.schema.validate(broken))
        for needle in ("podManagmentPolicy", "expected an integer, got '2'", "missing required field 'name'",
                       "defaultMode: expected an integer"):
            self.expect(needle in found, f"schema validator missed {needle!r}: {found}")
        policy = copy.deepcopy(d.of_kind("NetworkPolicy")[0])
        policy["spec"]["policyType"] = ["Ingress"]
        policy["spec"]["ingress"][0]["form"] = policy["spec"]["ingress"][0].pop("from")
        found = " ".join(self.schema.validate(policy))
        for needle in ("policyType", "'form'"):
            self.expect(needle in found, f"schema validator missed {needle!r} in a NetworkPolicy: {found}")
        # A built-in kind the validator has no entry for is an error, not a skip.
        ingress = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "x"}}
        self.expect(self.schema.validate(ingress), "an unknown built-in kind passed unvalidated")
        self.expect(self.schema.validate({"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor"})
                    is None, "custom resources are not validated")


class PipelineTest(Check):
    def test_defaults(self):
        d = CASES["defaults"]
        sts, stage = container(d, "StatefulSet", "-stage")
        self.expect(sts["spec"]["replicas"] == 2, "defaults: 2 stage pods")
        pipeline = json.loads(d.of_kind("ConfigMap")[0]["data"]["pipeline.json"])
        self.expect([s["layers"] for s in pipeline["stages"]] == ["0:15", "15:30"],
                    f"defaults: even split, got {pipeline}")
        self.expect(pipeline["stages"][1]["next"] == "tcp://prod-specline-scheduler.llm.svc.cluster.local:7200",
                    "defaults: the last stage sends to the scheduler's Service")
        self.expect(pipeline["stages"][0]["next"] == pipeline["stages"][1]["data_advertise"],
                    "defaults: stage 0 sends to the address stage 1 advertises")
        self.expect(flag(stage, "stage") == "$(POD_INDEX)", "defaults: --stage is the pod index")
        self.expect(not d.of_kind("ServiceMonitor") and not d.of_kind("HorizontalPodAutoscaler"),
                    "defaults: no ServiceMonitor or HPA unless asked")
        gw_dep, _ = container(d, "Deployment", "-gateway")
        self.expect(gw_dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 45,
                    "defaults: gateway grace = 30 s drain + 15 s")

    def test_gpu(self):
        g = CASES["gpu"]
        sts, stage = container(g, "StatefulSet", "-stage")
        self.expect(sts["spec"]["replicas"] == 4, "gpu: 4 stage pods")
        self.expect(stage["resources"]["limits"].get("nvidia.com/gpu") == 1, "gpu: one GPU per stage pod")
        self.expect(flag(stage, "device") == "cuda" and flag(stage, "dtype") == "bf16",
                    "gpu: --device=cuda --dtype=bf16")
        self.expect(flag(stage, "data-listen").startswith("nccl://"), "gpu: stages listen on nccl://")
        self.expect(container(g, "Deployment", "-scheduler")[1]["resources"]["limits"].get("nvidia.com/gpu") == 1,
                    "gpu: the scheduler's output head gets a GPU")
        self.expect(stage["image"].endswith("-cuda"), "gpu: the CUDA image")
        pipeline = json.loads(g.of_kind("ConfigMap")[0]["data"]["pipeline.json"])
        self.expect([s["layers"] for s in pipeline["stages"]] == ["0:8", "8:16", "16:24", "24:32"],
                    "gpu: 32 layers in 4")
        self.expect(all(s["next"].startswith("nccl://") for s in pipeline["stages"]), "gpu: nccl:// links")
        self.expect(len(g.of_kind("ServiceMonitor")) == 1 and len(g.of_kind("HorizontalPodAutoscaler")) == 1,
                    "gpu: ServiceMonitor and HPA rendered")
        self.expect(sts["spec"]["template"]["spec"].get("nodeSelector"), "gpu: node selector kept")

    def test_custom(self):
        c = CASES["custom"]
        pipeline = json.loads(c.of_kind("ConfigMap")[0]["data"]["pipeline.json"])
        self.expect([s["layers"] for s in pipeline["stages"]] == ["0:10", "10:20", "20:30"],
                    "custom: explicit partition")
        _, gw = container(c, "Deployment", "-gateway")
        self.expect(flag(gw, "auth-token-file") and flag(gw, "tls-cert")
                    and flag(gw, "tokenizer") == "/models/tok/tokenizer.json",
                    "custom: auth, TLS and tokenizer flags")
        self.expect([a for a in gw["args"] if a.startswith("--cache-share-group=")]
                    == ["--cache-share-group=team=alice,bob"], "custom: a cache share group")
        _, plain = container(CASES["defaults"], "Deployment", "-gateway")
        self.expect(not flag(plain, "cache-share-group"), "defaults: no cache share group")
        _, sched = container(c, "Deployment", "-scheduler")
        self.expect(flag(gw, "max-tokens-per-minute-per-principal") == "2000000"
                    and flag(gw, "metrics-per-principal") == "true"
                    and flag(sched, "admission") == "fifo" and flag(sched, "max-kv-blocks-per-tenant") == "512",
                    "custom: the multi-tenant limits (an integer above 1e6 stays an integer)")
        _, default_gw = container(CASES["defaults"], "Deployment", "-gateway")
        _, default_sched = container(CASES["defaults"], "Deployment", "-scheduler")
        self.expect(flag(default_gw, "max-tokens-per-minute-per-principal") is None
                    and flag(default_gw, "metrics-per-principal") is None
                    and flag(default_sched, "admission") == "fair"
                    and flag(default_sched, "max-kv-blocks-per-tenant") == "0",
                    "defaults: fair admission, no quotas, no principal labels")
        self.expect(not c.of_kind("PersistentVolumeClaim"), "custom: no PVC with an existing claim")

    def test_openai_http_port(self):
        _, gw = container(CASES["defaults"], "Deployment", "-gateway")
        self.expect(flag(gw, "http-port") == "8000", "defaults: the gateway serves the OpenAI API on 8000")
        self.expect({"name": "http", "containerPort": 8000, "protocol": "TCP"} in gw["ports"],
                    "defaults: the http container port")
        svc = [s for s in CASES["defaults"].of_kind("Service") if s["metadata"]["name"].endswith("-gateway")][0]
        self.expect(any(p["name"] == "http" and p["port"] == 8000 for p in svc["spec"]["ports"]),
                    "defaults: the gateway Service exposes http")
        self.expect("grpc" in gw["readinessProbe"], "defaults: gRPC health probes")
        _, probed = container(CASES["http-probe"], "Deployment", "-gateway")
        for kind in ("startupProbe", "readinessProbe"):
            got = probed[kind].get("httpGet", {})
            self.expect(got.get("path") == "/health" and got.get("port") == 8000 and got.get("scheme") == "HTTPS",
                        f"http-probe: {kind} is GET /health over HTTPS, got {probed[kind]}")
        _, off = container(CASES["no-http"], "Deployment", "-gateway")
        self.expect(flag(off, "http-port") is None and all(p["name"] != "http" for p in off["ports"]),
                    "no-http: no --http-port and no http port")

    def test_bad_values_fail_with_a_message(self):
        # values.schema.json violations name the value as a JSON pointer
        # (Helm v4: "- at '/stage/device': ..."), template failures in words.
        for sets, api, needle in [
            (["pipeline.stages=3", "pipeline.partition={0:10,10:30}"], (),
             "pipeline.partition has 2 ranges for 3 stages"),
            (["pipeline.stages=40"], (), "exceeds pipeline.layers"),
            (["pipeline.transport=rdma"], (), "/pipeline/transport"),
            (["serviceMonitor.enabled=true"], (), "Prometheus Operator CRDs"),
            (["model.download.enabled=true"], (), "model.download.url is required"),
            (["stage.device=tpu"], (), "/stage/device"),
            (["scheduler.defaultPolicy=fast"], (), "/scheduler/defaultPolicy"),
            (["pipeline.stages=0"], (), "/pipeline/stages"),
            (["internalAuth.secretKey=a/b"], (), "/internalAuth/secretKey"),
            (["internalAuth.enabled=yes"], (), "/internalAuth/enabled"),
            (["networkPolicy.metricsFrom[0].podSelectr.x=y"], (), "podSelectr"),
            (["gateway.probe=http", "gateway.httpPort=0"], (), "gateway.probe=http needs gateway.httpPort"),
            (["gateway.probe=tcp"], (), "/gateway/probe"),
            (["gateway.cacheShareGroups.team={alice,bob}"], (), "gateway.cacheShareGroups needs gateway.authSecret"),
            (["gateway.authSecret=tok", "gateway.cacheShareGroups.team[0]=b\\,c"], (),
             "/gateway/cacheShareGroups/team/0"),
            (["gateway.authSecret=tok", "gateway.cacheShareGroups.team=alice"], (),
             "/gateway/cacheShareGroups/team"),
        ]:
            with self.subTest(sets=sets):
                with self.assertRaises(RuntimeError, msg=f"{sets}: rendered, expected an error") as cm:
                    render(sets=sets, api=api)
                self.assertIn(needle, str(cm.exception))


class ClusterSecretTest(Check):
    """internalAuth: one Secret, mounted read-only into every gateway,
    scheduler and stage pod, named by --cluster-secret-file."""

    def secret_value(self, m):
        secrets = [s for s in m.of_kind("Secret") if s["metadata"]["name"] == "prod-specline-cluster-secret"]
        self.assertEqual(len(secrets), 1, "one generated cluster Secret")
        return secrets[0]["data"]["secret"]

    def check_wired(self, m, case, secret_name, key):
        for component in COMPONENTS:
            w = workload(m, component)
            pod = w["spec"]["template"]["spec"]
            c = pod["containers"][0]
            what = f"{case}: {component}"
            vols = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == secret_name]
            self.expect(len(vols) == 1, f"{what}: one volume of Secret {secret_name}")
            if not vols:
                continue
            src = vols[0]["secret"]
            self.expect(src.get("items") == [{"key": key, "path": "secret"}], f"{what}: key {key} as file 'secret'")
            self.expect(src.get("defaultMode") == 0o440, f"{what}: mode 0440 (owner and fsGroup only)")
            mounts = [vm for vm in c["volumeMounts"] if vm["name"] == vols[0]["name"]]
            self.expect(mounts == [{"name": vols[0]["name"], "mountPath": SECRET_DIR, "readOnly": True}],
                        f"{what}: mounted read-only at {SECRET_DIR}, got {mounts}")
            self.expect(c["args"].count(SECRET_FLAG) == 1, f"{what}: {SECRET_FLAG} once in {c['args']}")

    def test_generated_secret_on_every_workload(self):
        for case in ("defaults", "gpu", "custom"):
            m = CASES[case]
            data = self.secret_value(m)
            value = base64.b64decode(data).decode()
            self.expect(len(value) == 48 and value.isalnum(), f"{case}: 48 random alphanumerics, got {len(value)}")
            self.check_wired(m, case, "prod-specline-cluster-secret", "secret")
            sums = {workload(m, c)["spec"]["template"]["metadata"]["annotations"].get("checksum/cluster-secret")
                    for c in COMPONENTS}
            self.expect(sums == {hashlib.sha256(data.encode()).hexdigest()},
                        f"{case}: every pod's checksum/cluster-secret is the Secret's, got {sums}")
        self.expect(self.secret_value(CASES["defaults"]) != self.secret_value(render()),
                    "each install draws a new secret")

    def test_upgrade_keeps_the_secret(self):
        old = CASES["defaults"].get("Secret", "prod-specline-cluster-secret")
        live = copy.deepcopy(old)
        live["metadata"]["namespace"] = "llm"
        up = render(lookup=[live])
        self.expect(self.secret_value(up) == old["data"]["secret"], "an upgrade keeps the cluster's secret")
        for c in COMPONENTS:
            self.expect(workload(up, c)["spec"]["template"]["metadata"]["annotations"]
                        == workload(CASES["defaults"], c)["spec"]["template"]["metadata"]["annotations"],
                        f"upgrade: {c} pod annotations unchanged (no restart)")
        elsewhere = copy.deepcopy(live)
        elsewhere["metadata"]["namespace"] = "other"
        self.expect(self.secret_value(render(lookup=[elsewhere])) != old["data"]["secret"],
                    "a Secret of that name in another namespace is not reused")

    def test_existing_secret(self):
        m = CASES["locked"]
        self.expect(not m.of_kind("Secret"), "existingSecret: no Secret rendered")
        self.check_wired(m, "locked", "specline-internal", "token")
        self.expect(not any("checksum/cluster-secret" in workload(m, c)["spec"]["template"]["metadata"]["annotations"]
                            for c in COMPONENTS), "existingSecret, helm template: no checksum (value unknown)")
        live = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "specline-internal", "namespace": "llm"},
                "data": {"token": base64.b64encode(b"x" * 40).decode()}}
        up = render(sets=["internalAuth.existingSecret=specline-internal", "internalAuth.secretKey=token"],
                    lookup=[live])
        want = hashlib.sha256(live["data"]["token"].encode()).hexdigest()
        for c in COMPONENTS:
            self.expect(workload(up, c)["spec"]["template"]["metadata"]["annotations"].get("checksum/cluster-secret")
                        == want, f"existingSecret seen by lookup: {c} pods restart when it changes")

    def test_disabled(self):
        m = render(sets=["internalAuth.enabled=false"])
        self.expect(not m.of_kind("Secret"), "disabled: no Secret")
        for component in COMPONENTS:
            w = workload(m, component)
            pod = w["spec"]["template"]["spec"]
            self.expect(not any("secret" in v for v in pod["volumes"]), f"disabled: {component} mounts no Secret")
            self.expect(not any(a.startswith("--cluster-secret-file") for a in pod["containers"][0]["args"]),
                        f"disabled: {component} gets no --cluster-secret-file")


class NetworkPolicyTest(Check):
    """What the NetworkPolicies admit, evaluated with Kubernetes' rules."""

    OUTSIDER = Source({"app": "curious"})  # another pod of the release's namespace
    OTHER_NS = Source({"app.kubernetes.io/name": "specline", "app.kubernetes.io/instance": "prod",
                       "app.kubernetes.io/component": "gateway"}, same_namespace=False)  # look-alike elsewhere
    EXTERNAL = Source(same_namespace=False, ip="203.0.113.7")

    def sources(self, m):
        own = {c: Source(pod_labels(workload(m, c))) for c in COMPONENTS}
        return dict(own, outsider=self.OUTSIDER, other_namespace=self.OTHER_NS, external=self.EXTERNAL)

    def admitted(self, m, target, port_name_or_number):
        w = workload(m, target)
        number = port(w, port_name_or_number) if isinstance(port_name_or_number, str) else port_name_or_number
        return {name for name, src in self.sources(m).items() if admits(m, w, number, src)}

    def test_internal_ports_admit_only_the_release_pods(self):
        for case in ("defaults", "custom", "locked"):
            m = CASES[case]
            self.expect(len(m.of_kind("NetworkPolicy")) == 3, f"{case}: three NetworkPolicies")
            for target, port_name, want in [
                ("scheduler", "grpc", {"gateway"}),
                ("scheduler", "data", {"stage"}),
                ("stage", "grpc", {"scheduler"}),
                ("stage", "data", {"scheduler", "stage"}),
                ("scheduler", 40000, set()),  # any other port
                ("stage", 40000, set()),
            ]:
                got = self.admitted(m, target, port_name)
                self.expect(got == want, f"{case}: {target} port {port_name} admits {sorted(got)}, want {sorted(want)}")

    def test_public_ports_stay_reachable(self):
        everyone = {"gateway", "scheduler", "stage", "outsider", "other_namespace", "external"}
        d = CASES["defaults"]
        self.expect(self.admitted(d, "gateway", "grpc") == everyone, "defaults: the gateway API is public")
        self.expect(self.admitted(d, "gateway", "http") == everyone, "defaults: the OpenAI API is public")
        for target in COMPONENTS:
            self.expect(self.admitted(d, target, "metrics") == everyone, f"defaults: {target} metrics open")
        m = CASES["locked"]
        prom = Source({"app": "prometheus"}, same_namespace=False, namespace_labels={"team": "monitoring"})
        ingress = Source({"app": "nginx"}, same_namespace=False, namespace_labels={"role": "ingress"})
        for target in COMPONENTS:
            w = workload(m, target)
            self.expect(admits(m, w, port(w, "metrics"), prom), f"locked: monitoring scrapes {target}")
            self.expect(not admits(m, w, port(w, "metrics"), self.OUTSIDER), f"locked: {target} metrics closed")
        gw = workload(m, "gateway")
        self.expect(admits(m, gw, port(gw, "grpc"), ingress), "locked: the ingress namespace reaches the API")
        self.expect(not admits(m, gw, port(gw, "grpc"), self.EXTERNAL), "locked: others do not")
        self.expect(not admits(m, gw, port(gw, "grpc"), prom), "locked: monitoring cannot call the API")
        self.expect(admits(m, gw, port(gw, "http"), ingress), "locked: the ingress namespace reaches the HTTP API")
        self.expect(not admits(m, gw, port(gw, "http"), self.EXTERNAL), "locked: others do not reach it")

    def test_nccl_links_admit_every_port_between_scheduler_and_stages(self):
        g = CASES["gpu"]
        for target, want in [("scheduler", {"stage"}), ("stage", {"scheduler", "stage"})]:
            got = self.admitted(g, target, 40000)  # NCCL's bootstrap and socket ports are ephemeral
            self.expect(got == want, f"gpu: {target} admits {sorted(got)} on other ports, want {sorted(want)}")
        # Which includes each other's gRPC ports (the secret guards those);
        # nobody else gets in.
        self.expect(self.admitted(g, "scheduler", "grpc") == {"gateway", "stage"}, "gpu: scheduler gRPC")
        self.expect(self.admitted(g, "stage", "grpc") == {"scheduler", "stage"}, "gpu: stage gRPC")
        self.expect(self.admitted(g, "gateway", "grpc") >= {"outsider", "external"}, "gpu: the API stays public")

    def test_every_connection_the_chart_wires_is_admitted(self):
        """Who dials whom, read from the rendered flags and pipeline.json
        (not written down here), must pass the NetworkPolicies: the gateways
        the scheduler (--scheduler), the scheduler each stage (--stage-grpc)
        and stage 0's data port, each stage the next hop (pipeline.json)."""
        for case in ("defaults", "gpu", "custom", "locked"):
            m = CASES[case]
            gw, sched = workload(m, "gateway"), workload(m, "scheduler")
            pipeline = json.loads(m.of_kind("ConfigMap")[0]["data"]["pipeline.json"])["stages"]
            dials = [(gw, flag(gw["spec"]["template"]["spec"]["containers"][0], "scheduler"))]
            sched_c = sched["spec"]["template"]["spec"]["containers"][0]
            dials += [(sched, a) for a in flag(sched_c, "stage-grpc").split(",")]
            dials += [(sched, pipeline[0]["data_advertise"])]
            dials += [(workload(m, "stage"), s["next"]) for s in pipeline]
            self.expect(len(dials) == 2 + 2 * len(pipeline), f"{case}: {len(dials)} connections")
            for src, address in dials:
                host, number = address.split("://")[-1].rsplit(":", 1)
                target = self.resolve(m, host, int(number))
                what = f"{case}: {src['metadata']['name']} -> {address}"
                self.expect(target is not None, f"{what}: no Service/pod answers")
                if target:
                    self.expect(admits(m, target[0], target[1], Source(pod_labels(src))), f"{what}: not admitted")

    @staticmethod
    def resolve(m, host, number):
        """A cluster DNS name and Service port -> (workload, container port):
        <svc>.<ns>.svc.cluster.local, or <pod>.<svc>... behind a headless Service."""
        labels = host.split(".")
        for s in m.of_kind("Service"):
            name = s["metadata"]["name"]
            headless = s["spec"].get("clusterIP") == "None"
            if labels[0] != name and not (headless and len(labels) > 1 and labels[1] == name):
                continue
            sp = next((p for p in s["spec"]["ports"] if p["port"] == number), None)
            targets = m.pods_selected_by(s["spec"]["selector"])
            if sp and targets:
                return targets[0], port(targets[0], sp["targetPort"])
        return None

    def test_disabled(self):
        self.expect(not render(sets=["networkPolicy.enabled=false"]).of_kind("NetworkPolicy"),
                    "networkPolicy.enabled=false: none rendered")


class PipelinesTest(Check):
    """N pipelines: the LeaderWorkerSet's pods carry the cluster secret and
    its NetworkPolicies admit every connection a group makes, and nobody
    else; the router reaches the gateways through a locked API."""

    def lws_pods(self, m):
        return {w["role"]: w for w in m.workloads() if w["kind"] == "LeaderWorkerSet"}

    def test_lws_pods_carry_the_cluster_secret(self):
        for role, w in self.lws_pods(CASES["lws2"]).items():
            pod = w["spec"]["template"]["spec"]
            vol = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "prod-specline-cluster-secret"]
            self.expect(len(vol) == 1, f"lws2 {role}: the cluster Secret's volume")
            for c in pod["containers"]:
                _, flags = chart_checks.command_and_flags(c)
                self.expect(flags.count(SECRET_FLAG) == 1, f"lws2 {role} {c['name']}: {SECRET_FLAG}")
                self.expect({"name": "cluster-secret", "mountPath": SECRET_DIR, "readOnly": True} in c["volumeMounts"],
                            f"lws2 {role} {c['name']}: mounted read-only")

    def test_lws_network_policies(self):
        m = CASES["lws2"]
        pods = self.lws_pods(m)
        leader, worker = pods["leader"], pods["worker"]
        src = {"leader": Source(pod_labels(leader)), "stage": Source(pod_labels(worker)),
               "router": Source(pod_labels(next(d for d in m.of_kind("Deployment")
                                                if d["metadata"]["name"].endswith("-router")))),
               "outsider": NetworkPolicyTest.OUTSIDER, "external": NetworkPolicyTest.EXTERNAL}
        ingress = Source({"app": "nginx"}, same_namespace=False, namespace_labels={"role": "ingress"})
        src["ingress"] = ingress

        def admitted(w, name):
            number = port(w, name)
            return {k for k, v in src.items() if admits(m, w, number, v)}
        for w, name, want in [(leader, "sched-grpc", {"leader"}), (leader, "data", {"stage"}),
                              (worker, "grpc", {"leader"}), (worker, "data", {"leader", "stage"}),
                              (leader, "http", {"router", "ingress"}), (leader, "grpc", {"router", "ingress"}),
                              (leader, "metrics", set(src)), (leader, "sched-metrics", set(src)),
                              (leader, "kv-events", {"router"}), (leader, "kv-replay", {"router"})]:
            got = admitted(w, name)
            self.expect(got == want, f"lws2: {w['role']} port {name} admits {sorted(got)}, want {sorted(want)}")
        router = next(d for d in m.of_kind("Deployment") if d["metadata"]["name"].endswith("-router"))
        got = {k for k, v in src.items() if admits(m, router, port(router, "http"), v)}
        self.expect(got == {"ingress"}, f"lws2: the router's API admits {sorted(got)}")


    def test_kv_aware_schedulers_publish_where_only_the_router_subscribes(self):
        """router.policy kv_aware: every scheduler publishes its KV events
        (--kv-events-config on every address), its Service (plain) carries
        the two ports, and only the router may connect to them."""
        m = CASES["plain2"]
        router = next(d for d in m.of_kind("Deployment") if d["metadata"]["name"].endswith("-router"))
        src = {"router": Source(pod_labels(router)), "outsider": NetworkPolicyTest.OUTSIDER,
               "external": NetworkPolicyTest.EXTERNAL}
        schedulers = [w for w in m.workloads() if w["metadata"]["name"].endswith(("-scheduler", "-scheduler-0", "-scheduler-1"))]
        self.expect(len(schedulers) == 2, f"plain2: {len(schedulers)} schedulers")
        for w in schedulers:
            c = w["spec"]["template"]["spec"]["containers"][0]
            config = json.loads(flag(c, "kv-events-config"))
            self.expect(config.get("enable_kv_cache_events") is True and config["endpoint"] == "tcp://*:5557",
                        f"plain2 {w['metadata']['name']}: --kv-events-config {config}")
            for name in ("kv-events", "kv-replay"):
                got = {k for k, v in src.items() if admits(m, w, port(w, name), v)}
                self.expect(got == {"router"}, f"plain2 {w['metadata']['name']} {name} admits {sorted(got)}")
        services = [s for s in m.of_kind("Service") if s["metadata"]["name"].endswith(("-scheduler", "-scheduler-0", "-scheduler-1"))]
        for svc in services:
            names = {p["name"] for p in svc["spec"]["ports"]}
            self.expect({"kv-events", "kv-replay"} <= names, f"plain2 {svc['metadata']['name']}: ports {sorted(names)}")
        self.expect(not any("--kv-events-config" in " ".join(chart_checks.command_and_flags(c)[1])
                            for w in CASES["defaults"].workloads()
                            for c in w["spec"]["template"]["spec"]["containers"]),
                    "defaults: no KV events without a kv_aware router")


def main(argv):
    global BIN_DIR
    if len(argv) < 2 or argv[1].startswith("-"):
        print(__doc__)
        return 2
    BIN_DIR = argv[1]
    return unittest_exit.run(__name__, [argv[0]] + argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
