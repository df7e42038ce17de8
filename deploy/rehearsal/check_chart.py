#!/usr/bin/env python3
"""Renders the chart for the value sets users start from (defaults, the
4-stage GPU example, an explicit partition with auth/TLS and a PVC of their
own) and runs the structural checks on each against the built binaries;
then checks what each set must produce and that bad values fail to render
with a message naming the value.

    check_chart.py HELM_RENDER BIN_DIR
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import copy  # noqa: E402

import chart_checks  # noqa: E402
import k8s_schema  # noqa: E402
import manifests  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CHART = os.path.join(REPO, "deploy", "helm", "specline")
RULES = os.path.join(REPO, "deploy", "prometheus", "specline-rules.yaml")
MONITORING = ["monitoring.coreos.com/v1", "monitoring.coreos.com/v1/ServiceMonitor"]

failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)


def container(m, kind, suffix):
    w = next(d for d in m.of_kind(kind) if d["metadata"]["name"].endswith(suffix))
    return w, w["spec"]["template"]["spec"]["containers"][0]


def flag(c, name):
    return next((a.split("=", 1)[1] for a in c["args"] if a.startswith(f"--{name}=")), None)


def main(helm_render, bin_dir):
    jobs = chart_checks.rule_job_names(RULES)
    render = lambda values=(), sets=(), api=(): manifests.render(  # noqa: E731
        helm_render, CHART, values, sets, release="prod", namespace="llm", api_versions=api)

    cases = {
        "defaults": render(),
        "gpu": render([os.path.join(CHART, "values-gpu.yaml")], api=MONITORING),
        "custom": render(sets=["pipeline.stages=3", "pipeline.partition={0:10,10:20,20:30}",
                               "gateway.authSecret=tok", "gateway.tlsSecret=cert",
                               "modelCache.existingClaim=shared-models", "model.tokenizer=tok/tokenizer.json"]),
    }
    for name, m in cases.items():
        for e in chart_checks.check(m, bin_dir, jobs if m.of_kind("ServiceMonitor") else [],
                                    existing_claims=["shared-models"]):
            failures.append(f"{name}: {e}")

    # Every built-in object against the Kubernetes API types.
    if k8s_schema.models_dir():
        schema = k8s_schema.Schema(k8s_schema.models_dir())
        for name, m in cases.items():
            for doc in m.docs:
                for e in schema.validate(doc) or []:
                    failures.append(f"{name}: {doc['metadata']['name']}: {e}")
        # The validator must see these (so a pass above means something).
        broken = copy.deepcopy(container(cases["defaults"], "StatefulSet", "-stage")[0])
        broken["spec"]["podManagmentPolicy"] = "Parallel"
        broken["spec"]["replicas"] = "2"
        del broken["spec"]["template"]["spec"]["containers"][0]["name"]
        found = " ".join(schema.validate(broken))
        for needle in ("podManagmentPolicy", "expected an integer", "missing required field 'name'"):
            expect(needle in found, f"schema validator missed {needle!r}: {found}")
    else:
        print("note: Kubernetes API types not fetched (scripts/setup.sh does); schema validation skipped")

    d = cases["defaults"]
    sts, stage = container(d, "StatefulSet", "-stage")
    expect(sts["spec"]["replicas"] == 2, "defaults: 2 stage pods")
    pipeline = json.loads(d.of_kind("ConfigMap")[0]["data"]["pipeline.json"])
    expect([s["layers"] for s in pipeline["stages"]] == ["0:15", "15:30"], f"defaults: even split, got {pipeline}")
    expect(pipeline["stages"][1]["next"] == "tcp://prod-specline-scheduler.llm.svc.cluster.local:7200",
           "defaults: the last stage sends to the scheduler's Service")
    expect(pipeline["stages"][0]["next"] == pipeline["stages"][1]["data_advertise"],
           "defaults: stage 0 sends to the address stage 1 advertises")
    expect(flag(stage, "stage") == "$(POD_INDEX)", "defaults: --stage is the pod index")
    expect(not d.of_kind("ServiceMonitor") and not d.of_kind("HorizontalPodAutoscaler"),
           "defaults: no ServiceMonitor or HPA unless asked")
    gw_dep, gw = container(d, "Deployment", "-gateway")
    expect(gw_dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 45,
           "defaults: gateway grace = 30 s drain + 15 s")

    g = cases["gpu"]
    sts, stage = container(g, "StatefulSet", "-stage")
    expect(sts["spec"]["replicas"] == 4, "gpu: 4 stage pods")
    expect(stage["resources"]["limits"].get("nvidia.com/gpu") == 1, "gpu: one GPU per stage pod")
    expect(flag(stage, "device") == "cuda" and flag(stage, "dtype") == "bf16", "gpu: --device=cuda --dtype=bf16")
    expect(flag(stage, "data-listen").startswith("nccl://"), "gpu: stages listen on nccl://")
    expect(container(g, "Deployment", "-scheduler")[1]["resources"]["limits"].get("nvidia.com/gpu") == 1,
           "gpu: the scheduler's output head gets a GPU")
    expect(stage["image"].endswith("-cuda"), "gpu: the CUDA image")
    pipeline = json.loads(g.of_kind("ConfigMap")[0]["data"]["pipeline.json"])
    expect([s["layers"] for s in pipeline["stages"]] == ["0:8", "8:16", "16:24", "24:32"], "gpu: 32 layers in 4")
    expect(all(s["next"].startswith("nccl://") for s in pipeline["stages"]), "gpu: nccl:// links")
    expect(len(g.of_kind("ServiceMonitor")) == 1 and len(g.of_kind("HorizontalPodAutoscaler")) == 1,
           "gpu: ServiceMonitor and HPA rendered")
    expect(sts["spec"]["template"]["spec"].get("nodeSelector"), "gpu: node selector kept")

    c = cases["custom"]
    pipeline = json.loads(c.of_kind("ConfigMap")[0]["data"]["pipeline.json"])
    expect([s["layers"] for s in pipeline["stages"]] == ["0:10", "10:20", "20:30"], "custom: explicit partition")
    _, gw = container(c, "Deployment", "-gateway")
    expect(flag(gw, "auth-token-file") and flag(gw, "tls-cert") and flag(gw, "tokenizer") == "/models/tok/tokenizer.json",
           "custom: auth, TLS and tokenizer flags")
    expect(not c.of_kind("PersistentVolumeClaim"), "custom: no PVC with an existing claim")

    # Bad values: rendering fails and says which value.
    for sets, api, needle in [
        (["pipeline.stages=3", "pipeline.partition={0:10,10:30}"], (), "pipeline.partition has 2 ranges for 3 stages"),
        (["pipeline.stages=40"], (), "exceeds pipeline.layers"),
        (["pipeline.transport=rdma"], (), "pipeline.transport"),
        (["serviceMonitor.enabled=true"], (), "Prometheus Operator CRDs"),
        (["model.download.enabled=true"], (), "model.download.url is required"),
        (["stage.device=tpu"], (), "stage.device"),  # values.schema.json
        (["scheduler.defaultPolicy=fast"], (), "scheduler.defaultPolicy"),
        (["pipeline.stages=0"], (), "pipeline.stages"),
    ]:
        try:
            render(sets=sets, api=api)
            failures.append(f"{sets}: rendered, expected an error mentioning {needle!r}")
        except RuntimeError as e:
            expect(needle in str(e), f"{sets}: error {e} lacks {needle!r}")

    for f in failures:
        print(f"FAILED: {f}")
    print(f"{len(cases)} value sets rendered and checked, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
