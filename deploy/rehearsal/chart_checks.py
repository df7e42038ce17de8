"""Structural checks of the rendered chart against the real binaries: every
flag a container passes is one its binary documents, every port a Service,
probe, ServiceMonitor or NetworkPolicy names is one a container declares and
is told to listen on, every volume, ConfigMap, Secret, claim and scale
target exists, and a file a flag names under a Secret's mount is one that
Secret provides."""
import os
import re
import subprocess

from manifests import containers, matches, selector_matches


# vllm-router, the router's binary, is not specline's: it comes from its
# venv (scripts/setup.sh step 5a; the CLI's SPECLINE_VLLM_ROUTER).
ROUTER_BINARY = os.environ.get("SPECLINE_VLLM_ROUTER",
                               os.path.expanduser("~/.cache/specline/router-venv/bin/vllm-router"))


def binary_usage(bin_dir, command):
    path = ROUTER_BINARY if command == "vllm-router" else os.path.join(bin_dir, command)
    if not os.access(path, os.X_OK):
        return None
    r = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=30)
    return r.stdout + r.stderr if r.returncode == 0 else None


def flag_name(arg):
    return arg[2:].split("=", 1)[0]


def takes_list(usage, flag):
    """Whether argparse's usage shows --flag taking several values
    ("--worker-urls [WORKER_URLS ...]", "--selector SELECTOR [SELECTOR ...]")."""
    return re.search(r"--" + re.escape(flag) + r" (?:\w+ )?\[\w+ \.\.\.\]", usage) is not None


SHELL_EXEC = re.compile(r'^exec (\S+)((?: --[a-z0-9-]+=\S+)*) "\$@"$', re.M)


def command_and_flags(c):
    """(binary, flags): a container's binary and its --flag words. Either
    the binary is the only command word, or a shell wraps it
    (["/bin/sh", "-ec", SCRIPT, BINARY]: the script ends with `exec BINARY
    --flag=... "$@"`, the args are "$@"), as the LeaderWorkerSet's stages
    derive --stage and their neighbours from LWS's environment. None when
    neither."""
    cmd = c.get("command", [])
    if len(cmd) == 1:
        return cmd[0], list(c.get("args", []))
    if len(cmd) == 4 and cmd[0] == "/bin/sh" and cmd[1] in ("-c", "-ec"):
        m = SHELL_EXEC.search(cmd[2])
        if m and m.group(1) == cmd[3]:
            return cmd[3], m.group(2).split() + list(c.get("args", []))
    return None, None


def secret_files(volume, secrets):
    """The file names a secret volume provides: its items' paths, else the
    rendered Secret's keys; None when the Secret is not rendered (an
    existing one) and the volume lists no items."""
    src = volume["secret"]
    if src.get("items"):
        return {i["path"] for i in src["items"]}
    s = secrets.get(src["secretName"])
    return None if s is None else set(s.get("data", {})) | set(s.get("stringData", {}))


def check(m, bin_dir, rule_jobs, existing_claims=(), existing_secrets=()):
    """existing_claims, existing_secrets: PersistentVolumeClaims and Secrets
    the cluster already has (named in the values, not rendered)."""
    errors = []
    err = errors.append
    configmaps = {d["metadata"]["name"]: d for d in m.of_kind("ConfigMap")}
    secrets = {d["metadata"]["name"]: d for d in m.of_kind("Secret")}
    claims = {d["metadata"]["name"] for d in m.of_kind("PersistentVolumeClaim")}
    usages = {}
    for w in m.workloads():
        wname = f'{w["kind"]}/{w["metadata"]["name"]}'
        pod = w["spec"]["template"]["spec"]
        if not matches(w["spec"]["selector"], w["spec"]["template"]["metadata"]["labels"]):
            err(f"{wname}: selector does not match its pod template")
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for v in volumes.values():
            if "configMap" in v and v["configMap"]["name"] not in configmaps:
                err(f"{wname}: volume {v['name']} names ConfigMap {v['configMap']['name']}, not rendered")
            pvc = v.get("persistentVolumeClaim")
            if pvc and pvc["claimName"] not in claims and pvc["claimName"] not in existing_claims:
                err(f"{wname}: volume {v['name']} names claim {pvc['claimName']}, not rendered")
            sec = v.get("secret")
            if sec:
                rendered = secrets.get(sec["secretName"])
                if rendered is None and sec["secretName"] not in existing_secrets:
                    err(f"{wname}: volume {v['name']} names Secret {sec['secretName']}, not rendered")
                keys = set(rendered.get("data", {})) | set(rendered.get("stringData", {})) if rendered else None
                for item in sec.get("items", []):
                    if keys is not None and item["key"] not in keys:
                        err(f"{wname}: volume {v['name']} maps key {item['key']}, which Secret "
                            f"{sec['secretName']} lacks")
        sc = pod.get("securityContext", {})
        if not sc.get("runAsNonRoot") or int(sc.get("runAsUser", 0)) == 0:
            err(f"{wname}: pods must run as a non-root user")
        inits, mains = containers(w)
        for c in inits + mains:
            cname = f"{wname} container {c['name']}"
            for vm in c.get("volumeMounts", []):
                if vm["name"] not in volumes:
                    err(f"{cname}: mounts undeclared volume {vm['name']}")
            for vm in c.get("volumeMounts", []):
                v = volumes.get(vm["name"], {})
                if "secret" in v:
                    if not vm.get("readOnly"):
                        err(f"{cname}: Secret volume {vm['name']} is mounted writable")
                    files = secret_files(v, secrets)
                    prefix = vm["mountPath"].rstrip("/") + "/"
                    for a in c.get("args", []):
                        path = a.split("=", 1)[1] if a.startswith("--") and "=" in a else ""
                        if path.startswith(prefix) and files is not None and path[len(prefix):] not in files:
                            err(f"{cname}: {a} names a file Secret volume {vm['name']} does not provide "
                                f"(it has {sorted(files)})")
                if vm["mountPath"] == "/etc/specline":
                    cm = configmaps[volumes[vm["name"]]["configMap"]["name"]]
                    for a in c.get("args", []):
                        if a.startswith("--") and "=/etc/specline/" in a:
                            key = a.split("=/etc/specline/", 1)[1]
                            if key not in cm.get("data", {}):
                                err(f"{cname}: {a} names a file the ConfigMap lacks")
        for c in mains:
            cname = f"{wname} container {c['name']}"
            binary, args = command_and_flags(c)
            if binary is None:
                err(f"{cname}: expected the binary as the only command word (or a shell that execs it with "
                    f"\"$@\"), got {c.get('command', [])}")
                continue
            cmd = [binary]
            if cmd[0] not in usages:
                usages[cmd[0]] = binary_usage(bin_dir, cmd[0])
            usage = usages[cmd[0]]
            if usage is None:
                where = ROUTER_BINARY if cmd[0] == "vllm-router" else bin_dir
                err(f"{cname}: {cmd[0]} is not a binary at {where} that answers --help")
                continue
            env = {e["name"]: e for e in c.get("env", [])}
            for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", " ".join(args)):
                if var not in env:  # the kubelet would pass "$(VAR)" through literally
                    err(f"{cname}: args use $({var}), which the container's env does not define")
            for e in env.values():
                ref = e.get("valueFrom", {}).get("configMapKeyRef")
                if ref and ref["key"] not in configmaps.get(ref["name"], {}).get("data", {}):
                    err(f"{cname}: env {e['name']} names key {ref['key']} of ConfigMap {ref['name']}, which lacks it")
            list_flag = None  # a flag before its values (--worker-urls URL URL ...)
            for a in args:
                if not a.startswith("--"):
                    if list_flag is None:
                        err(f"{cname}: argument {a!r} is not --flag=value")
                    continue
                list_flag = flag_name(a) if "=" not in a and takes_list(usage, flag_name(a)) else None
                if not re.search(r"--" + re.escape(flag_name(a)) + r"(?![\w-])", usage):
                    err(f"{cname}: {cmd[0]} does not know --{flag_name(a)}")
            ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
            joined = " ".join(args)
            for name, number in ports.items():
                # The process is told to listen on each declared port.
                if not re.search(rf"(=|:){number}(?!\d)", joined):
                    err(f"{cname}: port {name}={number} is declared but no flag listens on it")
            for probe_kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                probe = c.get(probe_kind)
                if not probe:
                    err(f"{cname}: no {probe_kind}")
                    continue
                handler = probe.get("grpc") or probe.get("tcpSocket") or probe.get("httpGet")
                port = handler.get("port") if handler else None
                if port not in ports.values() and port not in ports:
                    err(f"{cname}: {probe_kind} port {port} is not a container port")
            drain = [int(flag.split("=", 1)[1]) for flag in args if flag.startswith("--drain-timeout-ms=")]
            grace = int(pod.get("terminationGracePeriodSeconds", 30))
            if drain and grace * 1000 < drain[0]:
                err(f"{cname}: terminationGracePeriodSeconds {grace} is shorter than the drain timeout")
    jobs = set()
    for s in m.of_kind("Service"):
        sname = f'Service/{s["metadata"]["name"]}'
        selected = m.pods_selected_by(s["spec"]["selector"])
        if not selected:
            err(f"{sname}: selects no workload")
        for p in s["spec"]["ports"]:
            for w in selected:
                cports = {cp["name"]: cp["containerPort"] for c in containers(w)[1] for cp in c.get("ports", [])}
                if p["targetPort"] not in cports:
                    err(f"{sname}: targetPort {p['targetPort']} is not a port of {w['metadata']['name']}")
                elif cports[p["targetPort"]] != p["port"]:
                    err(f"{sname}: port {p['port']} maps to {cports[p['targetPort']]}; keep them equal")
    for sm in m.of_kind("ServiceMonitor"):
        svcs = [s for s in m.of_kind("Service") if selector_matches(sm["spec"]["selector"], s["metadata"]["labels"])]
        label = sm["spec"].get("jobLabel")
        for s in svcs:
            for ep in sm["spec"]["endpoints"]:
                if ep["port"] not in {p["name"] for p in s["spec"]["ports"]}:
                    err(f"ServiceMonitor: Service {s['metadata']['name']} has no port {ep['port']}")
            jobs.add(s["metadata"]["labels"].get(label))
        # The router's own job (router.enabled) is scraped too; the rules
        # do not select it.
        if jobs - {"specline-router"} != set(rule_jobs):
            err(f"ServiceMonitor job names {sorted(map(str, jobs))} differ from the rules' {sorted(rule_jobs)}")
    for pdb in m.of_kind("PodDisruptionBudget"):
        if not m.pods_selected_by(pdb["spec"]["selector"]):
            err(f"PodDisruptionBudget/{pdb['metadata']['name']}: selects no workload")
    for np in m.of_kind("NetworkPolicy"):
        npname = f'NetworkPolicy/{np["metadata"]["name"]}'
        targets = m.pods_selected_by(np["spec"]["podSelector"])
        if not targets:
            err(f"{npname}: selects no workload")
        rules = np["spec"].get("ingress", [])
        for w in targets:
            cports = {cp["name"]: cp["containerPort"] for c in containers(w)[1] for cp in c.get("ports", [])}
            for r in rules:
                for p in r.get("ports", []):
                    if p.get("port") not in cports and p.get("port") not in cports.values():
                        err(f"{npname}: port {p.get('port')} is not a port of {w['metadata']['name']}")
            # A port the pod declares but no rule admits is unreachable.
            for name, number in cports.items():
                if not any(not r.get("ports") or any(p.get("port") in (name, number) for p in r["ports"])
                           for r in rules):
                    err(f"{npname}: no ingress rule admits port {name} of {w['metadata']['name']}")
        for r in rules:
            for peer in r.get("from", []):
                if set(peer) == {"podSelector"} and not m.pods_selected_by(peer["podSelector"]):
                    err(f"{npname}: ingress peer {peer['podSelector']} selects no workload of the chart")
    for hpa in m.of_kind("HorizontalPodAutoscaler"):
        ref = hpa["spec"]["scaleTargetRef"]
        if not m.get(ref["kind"], ref["name"]):
            err(f"HorizontalPodAutoscaler/{hpa['metadata']['name']}: no {ref['kind']}/{ref['name']}")
    return errors


def rule_job_names(rules_file):
    """The job="..." names the Prometheus rules select on."""
    with open(rules_file) as f:
        return sorted(set(re.findall(r'job="(specline-[a-z]+)"', f.read())))
