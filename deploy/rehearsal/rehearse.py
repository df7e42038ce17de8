#!/usr/bin/env python3
"""Deploy rehearsal: the Helm chart's pods on one machine.

Renders deploy/helm/specline with Helm (helm_chart.py: helm-python-sdk, so
run it with ~/.cache/specline/helm-venv/bin/python), checks the manifests against
the real binaries (chart_checks), then runs every pod with exactly the
chart's command, args, env, volumes and user, each in its own network and
mount namespace (cluster.py); waits for the probes; scrapes them with
Prometheus (Debian's package) the way the ServiceMonitor would, with the
project's recording and alert rules loaded; drives the gateway Service with
specline-loadtest (JSON + HTML report); checks the load tester's counts
against Prometheus; optionally screenshots the report in headless Chromium;
ends with SIGTERM like `helm uninstall` and checks every pod exits 0.

Needs root (namespaces, a bridge). Usage: deploy/README.md, docs/deploy.md.
Exit status: 0 passed, 1 failed, 77 (ctest's skip code) when it cannot run
here, or when everything else passed but the Prometheus checks could not run
(no `prometheus`; --no-prometheus leaves them out on purpose and passes).
"""
import argparse
import base64
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chart_checks  # noqa: E402
import cluster as cluster_mod  # noqa: E402
import helm_chart  # noqa: E402,F401  (fails at once, with the fix, without helm-python-sdk)
import manifests as manifests_mod  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CHART = os.path.join(REPO, "deploy", "helm", "specline")
RULES = os.path.join(REPO, "deploy", "prometheus", "specline-rules.yaml")
POD_UID = 10001  # the chart's runAsUser / fsGroup
# The metadata key internal RPCs carry the cluster secret in
# (common/cluster_secret.h, kClusterSecretMetadata).
SECRET_METADATA = "x-specline-cluster-secret"

# One internal RPC with an empty request (raw bytes: no generated stubs),
# optionally carrying the secret; prints the status code's name.
RPC_PROBE = r"""
import sys, grpc
addr, method, stream, secret = sys.argv[1], sys.argv[2], sys.argv[3] == "stream", sys.argv[4]
ch = grpc.insecure_channel(addr)
md = [("%s", secret)] if secret else None
try:
    if stream:
        for _ in ch.unary_stream(method)(b"", timeout=10, metadata=md):
            pass
    else:
        ch.unary_unary(method)(b"", timeout=10, metadata=md)
    print("OK")
except grpc.RpcError as e:
    print(e.code().name)
""" % SECRET_METADATA


def log(msg):
    print(f"[rehearsal] {msg}", flush=True)


def model_layers(specline, model):
    out = subprocess.run([specline, "info", "--model", model], check=True, capture_output=True, text=True).stdout
    return int(out.split("layers ")[1].split(",")[0])


def install_image_tree(build_dir, prefix):
    """The image's /opt/specline: what `cmake --install` puts there."""
    r = subprocess.run(["cmake", "--install", build_dir, "--prefix", prefix, "--component", "runtime"],
                       capture_output=True, text=True)
    if r.returncode != 0 or not os.path.isdir(os.path.join(prefix, "bin")):
        raise RuntimeError(f"cmake --install {build_dir} failed:\n{r.stdout}{r.stderr}")
    return os.path.join(prefix, "bin")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_secret_volume(m, pod, v, d):
    """A secret volume as the kubelet makes it: the Secret's keys (or the
    volume's items) as files of mode defaultMode, owned by root and the
    pod's fsGroup."""
    src = v["secret"]
    secret = m.get("Secret", src["secretName"])
    if secret is None:
        raise RuntimeError(f"volume {v['name']}: Secret {src['secretName']} is not rendered (an existing "
                           "Secret cannot be emulated)")
    data = {k: base64.b64decode(x) for k, x in secret.get("data", {}).items()}
    data.update({k: x.encode() for k, x in secret.get("stringData", {}).items()})
    items = src.get("items") or [{"key": k, "path": k} for k in data]
    group = int(pod.spec.get("securityContext", {}).get("fsGroup", 0))
    for item in items:
        path = os.path.join(d, item["path"])
        with open(path, "wb") as f:
            f.write(data[item["key"]])
        os.chmod(path, item.get("mode", src.get("defaultMode", 0o644)))
        os.chown(path, 0, group)


def prepare_volumes(m, c, work):
    """Host directories behind each pod's volumes: one directory per
    PersistentVolumeClaim (ReadWriteMany: shared by all pods), one per pod
    for an emptyDir and for a Secret's files, the ConfigMap's files. Owned by
    the pod's fsGroup."""
    dirs = {}
    for pod in c.pods:
        for v in pod.spec.get("volumes", []):
            if "persistentVolumeClaim" in v:
                d = os.path.join(work, "pv", v["persistentVolumeClaim"]["claimName"])
            elif "emptyDir" in v:
                d = os.path.join(work, "pods", pod.name, v["name"])
            elif "configMap" in v:
                d = os.path.join(work, "configmaps", v["configMap"]["name"])
                os.makedirs(d, exist_ok=True)
                for key, text in m.get("ConfigMap", v["configMap"]["name"])["data"].items():
                    with open(os.path.join(d, key), "w") as f:
                        f.write(text)
            elif "secret" in v:
                d = os.path.join(work, "pods", pod.name, v["name"])
                os.makedirs(d, exist_ok=True)
                write_secret_volume(m, pod, v, d)
            else:
                raise RuntimeError(f"volume {v['name']}: kind not emulated")
            os.makedirs(d, exist_ok=True)
            os.chown(d, POD_UID, POD_UID)
            dirs[(pod.name, v["name"])] = d
    return dirs


def start_prometheus(m, c, work):
    """Scrape jobs as the Prometheus Operator builds them from the
    ServiceMonitor: one job per Service, named by its jobLabel label, with
    the selected pods' metrics ports as targets."""
    port = free_port()
    monitors = m.of_kind("ServiceMonitor")
    jobs = []
    for s in m.of_kind("Service"):
        sm = next((x for x in monitors if manifests_mod.selector_matches(x["spec"]["selector"],
                                                                         s["metadata"]["labels"])), None)
        if sm is None:
            continue
        job = s["metadata"]["labels"][sm["spec"]["jobLabel"]]
        metrics_port = next(p["port"] for p in s["spec"]["ports"] if p["name"] == sm["spec"]["endpoints"][0]["port"])
        targets = [f"{p.ip}:{metrics_port}" for p in c.pods
                   if all(p.labels.get(k) == v for k, v in s["spec"]["selector"].items())]
        # Several Services of one job (one per pipeline): one job, every target.
        same = next((j for j in jobs if j["job_name"] == job), None)
        if same:
            same["static_configs"][0]["targets"] += targets
            continue
        jobs.append({"job_name": job, "metrics_path": sm["spec"]["endpoints"][0].get("path", "/metrics"),
                     "static_configs": [{"targets": targets}]})
    n_targets = sum(len(j["static_configs"][0]["targets"]) for j in jobs)
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "rule_files": [RULES], "scrape_configs": jobs}
    path = os.path.join(work, "prometheus.yml")
    with open(path, "w") as f:
        json.dump(config, f, indent=1)  # JSON is YAML
    logf = open(os.path.join(work, "prometheus.log"), "wb")
    p = subprocess.Popen(["prometheus", f"--config.file={path}", f"--storage.tsdb.path={work}/tsdb",
                          f"--web.listen-address=127.0.0.1:{port}"], stdout=logf, stderr=subprocess.STDOUT)
    return p, f"http://127.0.0.1:{port}", [j["job_name"] for j in jobs], n_targets


def grpc_python():
    """A Python interpreter with grpcio (Debian's python3-grpcio may sit
    under /usr/bin/python3 only), or None."""
    for py in (sys.executable, "python3", "/usr/bin/python3"):
        if shutil.which(py) and subprocess.run([py, "-c", "import grpc"], capture_output=True).returncode == 0:
            return py
    return None


def secret_file(c, pod, ctr=None):
    """The host file behind a container's --cluster-secret-file (default:
    the pod's first container), or None."""
    ctr = ctr or pod.containers[0]
    path = next((a.split("=", 1)[1] for a in ctr["args"] if a.startswith("--cluster-secret-file=")), None)
    for vm in ctr.get("volumeMounts", []) if path else []:
        if path.startswith(vm["mountPath"].rstrip("/") + "/"):
            return os.path.join(c.volume_dirs[(pod.name, vm["name"])], path[len(vm["mountPath"].rstrip("/")) + 1:])
    return None


def check_internal_plane(c, python):
    """From the node (which NetworkPolicies admit, so only the secret stands
    in the way): the scheduler's and every stage's internal RPCs are refused
    without the cluster secret and answered with the one the pods mount.
    Returns what was refused."""
    def call(pod, port, method, stream, secret):
        r = subprocess.run([python, "-c", RPC_PROBE, f"{pod.ip}:{port}", method, "stream" if stream else "unary",
                            secret], capture_output=True, text=True, timeout=60)
        return r.stdout.strip() or r.stderr.strip()[-300:]

    tried = []
    for pod, ctr in ((pod, ctr) for pod in c.pods for ctr in pod.containers):
        binary = chart_checks.command_and_flags(ctr)[0]
        if binary == "specline-scheduler":  # its own pod, or a LeaderWorkerSet leader's second container
            probes = [("/specline.internal.Scheduler/GetStats", False), ("/specline.internal.Scheduler/Submit", True)]
        elif binary == "specline-stage":
            probes = [("/specline.internal.StageWorker/GetInfo", False)]
        else:
            continue
        port = next((a.split("=", 1)[1] for a in ctr["args"] if a.startswith("--grpc-port=")), None)
        with open(secret_file(c, pod, ctr)) as f:
            value = f.read().rstrip()
        for method, stream in probes:
            without = call(pod, port, method, stream, "")
            if without != "UNAUTHENTICATED":
                raise RuntimeError(f"{pod.name} {method} without the cluster secret: {without}, not UNAUTHENTICATED")
            tried.append(f"{pod.name} {method}")
        method, stream = probes[0]
        got = call(pod, port, method, stream, value)
        if got != "OK":
            raise RuntimeError(f"{pod.name} {method} with the cluster secret: {got}, not OK")
    return tried


def install_router(router_binary, prefix):
    """The router's image tree: a copy of vllm-router's venv (the image's
    /opt/vllm-router, deploy/docker/Dockerfile.router) where the pods'
    user can read it, its scripts pointed at the copy's python. Returns its
    bin folder, for the pods' PATH."""
    venv = os.path.dirname(os.path.dirname(os.path.realpath(router_binary)))
    if not os.access(router_binary, os.X_OK) or not os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
        raise RuntimeError(f"--router needs vllm-router in a venv (scripts/setup.sh step 5a): {router_binary}")
    dest = os.path.join(prefix, "vllm-router")
    shutil.copytree(venv, dest, symlinks=True)
    bin_dir = os.path.join(dest, "bin")
    old = f"#!{venv}/bin/"
    for name in os.listdir(bin_dir):
        path = os.path.join(bin_dir, name)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            head = f.read(len(old))
        if head == old.encode():
            with open(path, "rb") as f:
                text = f.read()
            with open(path, "wb") as f:
                f.write(b"#!" + bin_dir.encode() + b"/" + text[len(old):])
    subprocess.run(["chmod", "-R", "a+rX", dest], check=True)
    return bin_dir


def router_completion(addr):
    """One completion through the router (OpenAI API; the rehearsal's
    stories260K has no chat template): its text."""
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 16}).encode()
    req = urllib.request.Request(f"http://{addr}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            reply = json.load(r)
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"POST /v1/completions through the router: {e.code} {e.read()[:500]!r}") from None
    return reply["choices"][0]["text"]


def rolling_restart(c, args, bin_dir, router):
    """A load test through the router while every pipeline is replaced in
    turn: SIGTERM (after the preStop hooks) to the pipeline's pods, their
    drain, new processes, ready again and healthy in the router's eyes,
    then the next pipeline. Every request of the load test must succeed.
    LeaderWorkerSet groups only: each is one worker of the router, as in a
    cluster (plain pipelines' gateways roll behind their Service, which
    kube-proxy spreads and this emulation has not)."""
    def pipeline_of(pod):
        group = pod.labels.get(cluster_mod.LWS + "group-index")
        return None if group is None else int(group)
    router_args = next(d for d in c.m.of_kind("Deployment")
                       if d["metadata"]["name"].endswith("-router"))["spec"]["template"]["spec"]["containers"][0]["args"]
    cb_timeout = int(next(a.split("=", 1)[1] for a in router_args if a.startswith("--cb-timeout-duration-secs=")))
    out = os.path.join(args.out, "loadtest-roll.json")
    rate = float(args.rates.split(",")[0])
    duration = max(12.0, 6.0 * args.pipelines)
    lt = subprocess.Popen([os.path.join(bin_dir, "specline-loadtest"), "--api", "openai", "--addr", router,
                           "--rate", str(rate), "--duration", str(duration), "--input-len", str(args.input_len),
                           "--output-len", str(args.output_len), "--timeout-s", "120", "--json", out],
                          stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    time.sleep(2)
    replaced = []
    for i in range(args.pipelines):
        pods = [p for p in c.pods if pipeline_of(p) == i]
        t0 = time.time()
        codes = c.terminate(pods)
        if any(code != 0 for code in codes.values()):
            raise RuntimeError(f"rolling restart: pipeline {i}'s pods did not exit cleanly: {codes}")
        for pod in pods:
            c.start(pod)
        c.wait_ready(timeout_s=120, pods=pods)
        # The next pipeline goes once the router routes to this one again:
        # service discovery adds a Ready pod at once; static URLs need a
        # health check (docs/deploy.md, "Rolling updates").
        wait_for("the router to see every pipeline healthy", lambda: router_healthy(router), 30)
        time.sleep(max(0.0, t0 + cb_timeout + 1 - time.time()))  # and its circuit half-open again
        log(f"rolling restart: pipeline {i} ({', '.join(p.name for p in pods)}) drained, replaced, ready and "
            f"routed to in {time.time() - t0:.1f} s")
        replaced.append({"pipeline": i, "pods": [p.name for p in pods], "seconds": round(time.time() - t0, 1)})
    rc = lt.wait(timeout=600)
    if not os.path.isfile(out):
        raise RuntimeError(f"rolling restart: the load test exited {rc} without a report")
    with open(out) as f:
        summary = json.load(f)["runs"][0]["summary"]
    log(f"rolling restart: load test through the router sent {summary['sent']}, completed {summary['completed']}, "
        f"failed {summary['failed']} {summary['errors'] or ''}")
    if summary["failed"] or summary["completed"] != summary["sent"]:
        raise RuntimeError(f"rolling restart: requests failed: {summary['errors']} {summary.get('error_examples')}")
    return {"replaced": replaced, "sent": summary["sent"], "completed": summary["completed"], "failed": 0}


def router_healthy(addr):
    """vllm-router's GET /health: 200 when no worker is unhealthy."""
    try:
        with urllib.request.urlopen(f"http://{addr}/health", timeout=2) as r:
            return r.status == 200
    except urllib.error.HTTPError:
        return False


def pipeline_counts(c, series):
    """Prometheus' per-target success counts summed by pipeline (the
    gateway pod's specline.io/pipeline label, or its LWS group)."""
    by_ip = {}
    for pod in c.pods:
        key = pod.labels.get("specline.io/pipeline", pod.labels.get(cluster_mod.LWS + "group-index", "0"))
        by_ip[pod.ip] = f"pipeline {key}"
    out = {}
    for s in series:
        pipe = by_ip[s["metric"]["instance"].rsplit(":", 1)[0]]
        out[pipe] = out.get(pipe, 0) + int(float(s["value"][1]))
    return out


def prom_query(base, query):
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)["data"]["result"]


def wait_for(what, fn, timeout_s):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            v = fn()
            if v:
                return v
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"timed out waiting for {what}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/specline/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--gateways", type=int, default=2)
    ap.add_argument("--pipelines", type=int, default=1, help="pipelines.replicas")
    ap.add_argument("--mode", choices=["plain", "leaderWorkerSet"], default="plain",
                    help="pipelines.mode (leaderWorkerSet: the LWS controller's part is emulated: pod names, "
                         "labels, LWS_* environment, its headless Service)")
    ap.add_argument("--router", action="store_true",
                    help="router.enabled with static worker URLs (no Kubernetes API here); the load test goes "
                         "through it (OpenAI API) and every pipeline must serve part of it")
    ap.add_argument("--roll", action="store_true",
                    help="with --router and --mode leaderWorkerSet: a rolling update under load, one group at a "
                         "time as LWS replaces them, while a load test runs through the router; no request may "
                         "fail")
    ap.add_argument("--router-binary", default=chart_checks.ROUTER_BINARY,
                    help="vllm-router of a venv (scripts/setup.sh step 5a), copied into the pods' image tree")
    ap.add_argument("--values", action="append", default=[], help="extra values file")
    ap.add_argument("--set", action="append", default=[], help="extra --set")
    ap.add_argument("--rates", default="2,4,8", help="load-test sweep (requests/s)")
    ap.add_argument("--duration", type=float, default=20, help="seconds per rate")
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--slo-ttft-ms", type=float, default=1000, help="goodput SLO")
    ap.add_argument("--slo-tpot-ms", type=float, default=200, help="goodput SLO")
    ap.add_argument("--out", default=os.path.join(REPO, "build", "rehearsal"), help="report, JSON, screenshot")
    ap.add_argument("--screenshot", action="store_true", help="report screenshot with headless Chromium")
    ap.add_argument("--no-prometheus", action="store_true",
                    help="leave out Prometheus and its checks on purpose (passes; without prometheus "
                         "installed the run ends as skipped)")
    ap.add_argument("--keep-work", action="store_true")
    args = ap.parse_args()

    if args.roll and not (args.router and args.mode == "leaderWorkerSet"):
        # A plain pipeline's gateways roll behind their Service, which
        # kube-proxy spreads and this emulation does not have.
        ap.error("--roll needs --router and --mode leaderWorkerSet")
    if not cluster_mod.can_run():
        log("needs root and network/mount namespaces (unshare --net --mount): cannot rehearse here")
        return 77
    if not os.path.isfile(args.model):
        log(f"model {args.model} not found: cannot rehearse")
        return 77
    # Without prometheus the rest still runs, but the run ends as skipped:
    # its Prometheus checks did not happen, which is not a pass.
    skipped = []  # checks that could not run here: the result is then a skip
    prometheus_missing = not args.no_prometheus and not shutil.which("prometheus")
    if prometheus_missing:
        log("prometheus not installed (Debian package prometheus): rehearsing without it; "
            "the result will be SKIPPED, not passed")
        skipped.append("the Prometheus checks (every target scraped, the gateways' success counter equal to the "
                       "load tester's count, the recording rules): prometheus is not installed (Debian package "
                       "prometheus; scripts/setup.sh installs it)")
        args.no_prometheus = True
    python_grpc = grpc_python()
    os.makedirs(args.out, exist_ok=True)
    # Not under /tmp: each pod gets its own /tmp, which would hide this.
    work = tempfile.mkdtemp(prefix="specline-rehearsal-", dir="/var/tmp")
    os.chmod(work, 0o755)
    log(f"work dir {work}")
    bin_dir = install_image_tree(args.build_dir, os.path.join(work, "opt", "specline"))
    specline = os.path.join(bin_dir, "specline")

    # The model arrives through the chart's download init container (curl,
    # file:// URL standing in for the model hub), checksum included.
    src = os.path.join(work, "origin", os.path.basename(args.model))
    os.makedirs(os.path.dirname(src))
    shutil.copy(args.model, src)
    os.chmod(os.path.dirname(src), 0o755)
    sha = hashlib.sha256(open(src, "rb").read()).hexdigest()
    sets = [f"model.file={os.path.basename(args.model)}", "model.download.enabled=true",
            f"model.download.url=file://{src}", f"model.download.sha256={sha}",
            f"pipeline.stages={args.stages}", f"pipeline.layers={model_layers(specline, src)}",
            f"gateway.replicas={args.gateways}", "serviceMonitor.enabled=true",
            "gateway.drainTimeoutMs=5000", "scheduler.drainTimeoutMs=5000", "stage.threads=1",
            f"pipelines.replicas={args.pipelines}", f"pipelines.mode={args.mode}"]
    api = ["monitoring.coreos.com/v1", "monitoring.coreos.com/v1/ServiceMonitor"]
    if args.mode == "leaderWorkerSet":
        api.append("leaderworkerset.x-k8s.io/v1/LeaderWorkerSet")
    extra_path = []
    if args.router:
        # Probed every second, so a pipeline leaves and rejoins the rotation quickly.
        sets += ["router.enabled=true", "router.discovery=static", "router.healthCheckIntervalSecs=1",
                 "router.workerStartupCheckInterval=1", "router.healthFailureThreshold=2",
                 "router.circuitBreaker.timeoutSecs=2"]
        extra_path.append(install_router(args.router_binary, os.path.join(work, "opt")))
    sets += args.set
    m = manifests_mod.render(CHART, args.values, sets, api_versions=api)
    log(f"rendered {len(m.docs)} manifests: " + ", ".join(sorted({d['kind'] for d in m.docs})))

    if args.router:
        chart_checks.ROUTER_BINARY = os.path.join(extra_path[0], "vllm-router")
    errors = chart_checks.check(m, bin_dir, chart_checks.rule_job_names(RULES))
    if errors:
        for e in errors:
            log(f"CHECK FAILED: {e}")
        return 1
    log("structural checks passed")

    c = cluster_mod.Cluster(m, "default", work, {}, bin_dir, extra_path=extra_path)
    prom = None
    result = {"ok": False}
    try:
        c.up()
        c.volume_dirs = prepare_volumes(m, c, work)
        for pod in c.pods:
            c.start(pod)
            log(f"started {pod.name} at {pod.ip}")
        t0 = time.time()
        c.wait_ready(timeout_s=180)
        log(f"all {len(c.pods)} pods ready in {time.time() - t0:.1f} s")
        gateway_svc = next(s["metadata"]["name"] for s in m.of_kind("Service")
                           if s["metadata"]["labels"].get("specline.io/job") == "specline-gateway")
        gateway = c.service_address(gateway_svc, "grpc")
        r = subprocess.run([specline, "client", "--addr", gateway, "--prompt", "Once upon a time",
                            "--max-tokens", "24"], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"specline client failed: {r.stderr}")
        log(f"streamed through the gateway Service: {r.stdout.strip()!r}")
        router = None
        if args.router:
            router = c.service_address(next(s["metadata"]["name"] for s in m.of_kind("Service")
                                            if s["metadata"]["labels"].get("specline.io/job") == "specline-router"),
                                       "http")
            reply = router_completion(router)
            log(f"completion through the router Service: {reply!r}")
            result["router_completion"] = reply

        if not all(secret_file(c, p, ctr) for p in c.pods for ctr in p.containers
                   if chart_checks.command_and_flags(ctr)[0].startswith("specline")):
            log("internal plane: no cluster secret in these values (internalAuth.enabled=false); not checked")
            result["internal_plane"] = "no secret (internalAuth.enabled=false)"
        elif python_grpc is None:
            skipped.append("the internal-plane check (RPCs without the cluster secret refused): no Python with "
                           "grpcio (Debian package python3-grpcio)")
            result["internal_plane"] = "skipped: no grpcio"
        else:
            tried = check_internal_plane(c, python_grpc)
            log(f"internal plane: {len(tried)} RPCs refused without the cluster secret, answered with it")
            result["internal_plane"] = {"refused_without_secret": tried}

        if not args.no_prometheus:
            prom, prom_url, jobs, n_targets = start_prometheus(m, c, work)
            try:
                wait_for("Prometheus to scrape every target",
                         lambda: len([x for x in prom_query(prom_url, 'up{job=~"specline-.*"} == 1')]) == n_targets,
                         60)
            except RuntimeError:
                down = [(x["metric"]["job"], x["metric"]["instance"])
                        for x in prom_query(prom_url, 'up{job=~"specline-.*"} == 0')]
                raise RuntimeError(f"Prometheus does not scrape every target: {n_targets} expected, down: {down}")
            log(f"Prometheus scrapes {n_targets} targets of {len(c.pods)} pods in jobs {jobs}")

        report_json = os.path.join(args.out, "loadtest.json")
        report_html = os.path.join(args.out, "loadtest.html")
        target = ["--api", "openai", "--addr", router] if router else ["--addr", gateway]
        lt = [os.path.join(bin_dir, "specline-loadtest")] + target + ["--sweep", args.rates,
              "--duration", str(args.duration), "--input-len", str(args.input_len),
              "--output-len", str(args.output_len), "--timeout-s", "120",
              "--slo-ttft-ms", str(args.slo_ttft_ms), "--slo-tpot-ms", str(args.slo_tpot_ms),
              "--json", report_json, "--html", report_html]
        log("load test: " + " ".join(lt[1:]))
        subprocess.run(lt, check=True, timeout=900)
        report = json.load(open(report_json))
        completed = sum(run["summary"]["completed"] for run in report["runs"]) + 1  # + the client stream

        if prom:
            time.sleep(3)  # a few scrapes after the last request
            served = wait_for("gateway counters", lambda: prom_query(
                prom_url, 'sum(specline_request_success_total{job="specline-gateway"})'), 30)
            served = int(float(served[0]["value"][1]))
            log(f"load tester completed {completed} (with the client), gateways counted {served}")
            if served != completed + (1 if router else 0):  # + the completion through the router
                raise RuntimeError(f"Prometheus counts {served} successful requests, the load tester {completed}")
            if args.pipelines > 1:
                per = pipeline_counts(c, prom_query(
                    prom_url, 'sum by (instance) (specline_request_success_total{job="specline-gateway"})'))
                log(f"successful requests per pipeline: {per}")
                result["served_per_pipeline"] = per
                if len(per) != args.pipelines or not all(per.values()):
                    raise RuntimeError(f"not every pipeline served requests: {per}")
            # The project's recording rules evaluate over the scraped series.
            rec = wait_for("the recording rule specline:time_to_first_token_seconds:p50_5m", lambda: [
                r for r in prom_query(prom_url, "specline:time_to_first_token_seconds:p50_5m")
                if r["value"][1] not in ("NaN", "+Inf", "-Inf")], 30)
            result["prometheus_ttft_p50_5m_ms"] = float(rec[0]["value"][1]) * 1e3
            alerts = prom_query(prom_url, 'ALERTS{alertstate="firing"}')
            result["firing_alerts"] = sorted({a["metric"]["alertname"] for a in alerts})

        if args.roll:
            result["rolling_restart"] = rolling_restart(c, args, bin_dir, router)
            completed += result["rolling_restart"]["completed"]

        live = c.liveness_all()
        if not all(live.values()):
            raise RuntimeError(f"liveness failed: {live}")
        codes = c.terminate()
        log(f"SIGTERM exit codes: {codes}")
        result["exit_codes"] = codes
        if any(code != 0 for code in codes.values()):
            raise RuntimeError(f"pods did not exit cleanly: {codes}")
        result.update(ok=True, pods=len(c.pods), pipelines=args.pipelines, mode=args.mode, router=args.router,
                      completed=completed,
                      runs=[{"rate": run["offered_rate"], "completed": run["summary"]["completed"],
                             "ttft_p50_ms": run["summary"]["ttft_ms"]["p50"],
                             "ttft_p99_ms": run["summary"]["ttft_ms"]["p99"],
                             "goodput_fraction": run["summary"]["goodput_fraction"],
                             "throughput_rps": run["summary"]["request_throughput"],
                             "tpot_p50_ms": run["summary"]["tpot_ms"]["p50"]} for run in report["runs"]])
    except Exception as e:  # report with the pods' logs, then clean up
        log(f"FAILED: {e}")
        for pod in c.pods:
            log(f"--- {pod.name} log tail ---\n{cluster_mod.tail(pod.log)}")
        result["error"] = str(e)
    finally:
        if prom:
            prom.terminate()
            prom.wait()
        c.down()
        if not args.keep_work:
            shutil.rmtree(work, ignore_errors=True)

    if result["ok"] and args.screenshot:
        png = os.path.join(args.out, "loadtest-report.png")
        subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--window-size=1280,2600", f"--screenshot={png}", f"file://{report_html}"],
                       check=True, capture_output=True, timeout=120)
        log(f"screenshot: {png}")
        result["screenshot"] = png
    result["prometheus"] = ("checked" if not args.no_prometheus else
                            "skipped: prometheus not installed" if prometheus_missing else "left out (--no-prometheus)")
    with open(os.path.join(args.out, "rehearsal.json"), "w") as f:
        json.dump(result, f, indent=1)
    if not result["ok"]:
        log("FAILED")
        return 1
    if skipped:
        for what in skipped:
            log(f"SKIPPED: everything else passed, but not {what}")
        return 77
    log("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
