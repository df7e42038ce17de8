"""A one-machine stand-in for the kubelet: each pod of the rendered chart
runs in its own network namespace (own IP on a bridge, like a pod network)
and mount namespace (the pod's volumes at the chart's mount paths, a hosts
file resolving the Services' cluster DNS names), as the pod's user, with the
container's exact command, args and env ($(VAR) expanded as the kubelet
does). Probes are run from the host the way the kubelet runs them."""
import os
import re
import shlex
import signal
import socket
import subprocess
import time

from manifests import containers, replicas


def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True)


def can_run():
    """Network and mount namespaces need root (CAP_SYS_ADMIN, CAP_NET_ADMIN)."""
    if os.geteuid() != 0:
        return False
    probe = f"slprobe{os.getpid() % 100000}"
    try:
        subprocess.run(["unshare", "--net", "--mount", "true"], check=True, capture_output=True)
        subprocess.run(["ip", "link", "add", probe, "type", "bridge"], check=True, capture_output=True)
        subprocess.run(["ip", "link", "del", probe], check=True, capture_output=True)
        return True
    except (OSError, subprocess.CalledProcessError):
        return False


LWS = "leaderworkerset.sigs.k8s.io/"  # the labels LWS puts on its pods


class Pod:
    """One pod: its containers run as processes in one network namespace.
    A LeaderWorkerSet's pods (workload kind LeaderWorkerSet, manifests.
    lws_workloads) get what the LWS controller gives them: the names
    <lws>-<group> and <lws>-<group>-<worker>, its labels, and
    LWS_LEADER_ADDRESS, LWS_GROUP_SIZE and LWS_WORKER_INDEX in every
    container."""

    def __init__(self, name, workload, ordinal, ip, netns, namespace="default", group=None, worker=None):
        self.name, self.workload, self.ordinal, self.ip, self.netns = name, workload, ordinal, ip, netns
        self.spec = workload["spec"]["template"]["spec"]
        self.labels = dict(workload["spec"]["template"]["metadata"].get("labels", {}))
        self.extra_env = {}
        if workload["kind"] == "StatefulSet":
            self.labels["apps.kubernetes.io/pod-index"] = str(ordinal)
        if workload["kind"] == "LeaderWorkerSet":
            lws = workload["lws"]["metadata"]["name"]
            size = int(workload["lws"]["spec"]["leaderWorkerTemplate"].get("size", 1))
            self.labels.update({LWS + "name": lws, LWS + "group-index": str(group),
                                LWS + "worker-index": str(worker)})
            self.extra_env = {"LWS_LEADER_ADDRESS": f"{lws}-{group}.{lws}.{namespace}",
                              "LWS_GROUP_SIZE": str(size), "LWS_WORKER_INDEX": str(worker)}
        self.processes = []  # one per container, in the template's order
        self.log = None
        self.started = False
        self.ready = False

    @property
    def containers(self):
        return containers(self.workload)[1]


def expand(text, env):
    """The kubelet's $(VAR) expansion: $$ escapes, unknown names stay as is."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


class Cluster:
    def __init__(self, manifests, namespace, work, volume_dirs, bin_dir, subnet=None, extra_path=()):
        self.m, self.ns, self.work = manifests, namespace, work
        self.volume_dirs = volume_dirs  # volume name -> host dir (PVC, emptyDir, ConfigMap files)
        self.bin_dir = bin_dir
        self.extra_path = list(extra_path)  # more of the image's PATH (the router's venv)
        self.subnet = subnet or free_subnet()
        self.tag = f"{os.getpid() % 10000:04d}"
        self.bridge = f"slbr{self.tag}"
        self.pods = []
        self.created_dirs = []
        self.hosts_file = os.path.join(work, "hosts")
        self.resolv_file = os.path.join(work, "resolv.conf")

    # -- network -------------------------------------------------------------
    def up(self):
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        k = 0
        for w in self.m.workloads():
            base = w["metadata"]["name"]
            for i in range(replicas(w)):
                group = worker = None
                if w["kind"] == "LeaderWorkerSet":
                    lws = w["lws"]["metadata"]["name"]
                    if w["role"] == "leader":
                        group, worker, name = i, 0, f"{lws}-{i}"
                    else:
                        per_group = int(w["lws"]["spec"]["leaderWorkerTemplate"]["size"]) - 1
                        group, worker = i // per_group, i % per_group + 1
                        name = f"{lws}-{group}-{worker}"
                else:
                    name = f"{base}-{i}" if w["kind"] == "StatefulSet" else f"{base}-rehearsal-{i}"
                pod = Pod(name, w, i, f"{self.subnet}.{10 + k}", f"sl{self.tag}-{k}", self.ns, group, worker)
                veth = f"slv{self.tag}{k}"
                sh("ip", "netns", "add", pod.netns)
                sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", pod.netns)
                sh("ip", "link", "set", veth, "master", self.bridge, "up")
                for cmd in (["ip", "addr", "add", f"{pod.ip}/24", "dev", "eth0"],
                            ["ip", "link", "set", "eth0", "up"], ["ip", "link", "set", "lo", "up"],
                            ["ip", "route", "add", "default", "via", f"{self.subnet}.1"]):
                    sh("ip", "netns", "exec", pod.netns, *cmd)
                self.pods.append(pod)
                k += 1
        self._write_hosts()

    def _write_hosts(self):
        """What cluster DNS answers: Service names (ClusterIP: the first
        selected pod, there is no kube-proxy here) and, for headless
        Services, one name per pod."""
        lines = ["127.0.0.1 localhost"]
        for pod in self.pods:
            lines.append(f"{pod.ip} {pod.name}")
        for s in self.m.of_kind("Service"):
            svc = s["metadata"]["name"]
            pods = [p for p in self.pods if all(p.labels.get(k) == v for k, v in s["spec"]["selector"].items())]
            if not pods:
                continue
            suffixes = [f"{svc}.{self.ns}.svc.cluster.local", f"{svc}.{self.ns}.svc", f"{svc}.{self.ns}", svc]
            if s["spec"].get("clusterIP") == "None":
                for p in pods:
                    lines.append(f"{p.ip} " + " ".join(f"{p.name}.{x}" for x in suffixes))
            lines.append(f"{pods[0].ip} " + " ".join(suffixes))
        # The headless Service LWS makes for each LeaderWorkerSet (named
        # like it, publishing not-ready pods): <pod>.<lws>.<namespace>...
        for lws in {p.labels[LWS + "name"] for p in self.pods if LWS + "name" in p.labels}:
            domains = [f"{lws}.{self.ns}.svc.cluster.local", f"{lws}.{self.ns}.svc", f"{lws}.{self.ns}", lws]
            for p in self.pods:
                if p.labels.get(LWS + "name") == lws:
                    lines.append(f"{p.ip} " + " ".join(f"{p.name}.{d}" for d in domains))
        with open(self.hosts_file, "w") as f:
            f.write("\n".join(lines) + "\n")
        # No DNS server inside the pod network: queries must fail at once
        # (port 53 on the pod's loopback refuses) rather than time out
        # against the host's resolver, which the pods cannot reach.
        with open(self.resolv_file, "w") as f:
            f.write(f"nameserver 127.0.0.1\nsearch {self.ns}.svc.cluster.local svc.cluster.local cluster.local\n")

    def service_address(self, name, port_name):
        s = self.m.get("Service", name)
        port = next(p["port"] for p in s["spec"]["ports"] if p["name"] == port_name)
        pod = next(p for p in self.pods if all(p.labels.get(k) == v for k, v in s["spec"]["selector"].items()))
        return f"{pod.ip}:{port}"

    # -- pods ----------------------------------------------------------------
    def _mount_target(self, path):
        """Creates the mount point on the host, remembering every directory
        made (parents first) so down() leaves the host as it was."""
        missing = []
        p = os.path.abspath(path)
        while not os.path.isdir(p):
            missing.append(p)
            p = os.path.dirname(p)
        for d in reversed(missing):
            os.mkdir(d)
            self.created_dirs.append(d)

    def _env(self, pod, c):
        path = ":".join([self.bin_dir] + self.extra_path + ["/usr/local/bin", "/usr/bin", "/bin"])
        env = {"PATH": path, "HOSTNAME": pod.name, "HOME": "/tmp"}
        env.update(pod.extra_env)
        for e in c.get("env", []):
            if "value" in e:
                env[e["name"]] = expand(str(e["value"]), env)
                continue
            ref = e["valueFrom"].get("configMapKeyRef")
            if ref:
                env[e["name"]] = self.m.get("ConfigMap", ref["name"])["data"][ref["key"]]
                continue
            field = e["valueFrom"]["fieldRef"]["fieldPath"]
            m = re.fullmatch(r"metadata\.labels\['(.+)'\]", field)
            if m:
                env[e["name"]] = pod.labels.get(m.group(1), "")
            elif field == "metadata.name":
                env[e["name"]] = pod.name
            elif field == "metadata.namespace":
                env[e["name"]] = self.ns
            elif field == "status.podIP":
                env[e["name"]] = pod.ip
            else:
                raise ValueError(f"fieldRef {field} is not emulated")
        return env

    def _command_line(self, pod, c):
        """ip netns exec -> unshare (private mounts) -> sh (bind mounts) ->
        setpriv (the pod's uid/gid) -> env -i -> the container's argv."""
        env = self._env(pod, c)
        argv = [expand(a, env) for a in c.get("command", []) + c.get("args", [])]
        sc = pod.spec.get("securityContext", {})
        uid, gid = int(sc.get("runAsUser", 0)), int(sc.get("runAsGroup", sc.get("runAsUser", 0)))
        binds = [f"mount --bind {shlex.quote(self.hosts_file)} /etc/hosts",
                 f"mount --bind {shlex.quote(self.resolv_file)} /etc/resolv.conf"]
        for vm in c.get("volumeMounts", []):
            self._mount_target(vm["mountPath"])
            src = self.volume_dirs[(pod.name, vm["name"])]
            binds.append(f"mount --bind {shlex.quote(src)} {shlex.quote(vm['mountPath'])}")
            if vm.get("readOnly"):
                binds.append(f"mount -o remount,bind,ro {shlex.quote(vm['mountPath'])}")
        run = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--no-new-privs",
               "env", "-i"] + [f"{k}={v}" for k, v in env.items()] + argv
        script = " && ".join(binds) + " && exec " + " ".join(shlex.quote(a) for a in run)
        return ["ip", "netns", "exec", pod.netns, "unshare", "--mount", "--propagation", "private",
                "/bin/sh", "-c", script]

    def start(self, pod):
        """Init containers in turn (each must exit 0), then the containers,
        each a process in the pod's network namespace (one log per pod).
        Starting a pod again (a rollout's replacement) resets its probes."""
        pod.started = pod.ready = False
        inits, mains = containers(pod.workload)
        pod.log = os.path.join(self.work, f"{pod.name}.log")
        log = open(pod.log, "ab")
        for c in inits:
            r = subprocess.run(self._command_line(pod, c), stdout=log, stderr=subprocess.STDOUT, timeout=300)
            if r.returncode != 0:
                raise RuntimeError(f"{pod.name}: init container {c['name']} exited {r.returncode}")
        pod.processes = [subprocess.Popen(self._command_line(pod, c), stdout=log, stderr=subprocess.STDOUT)
                         for c in mains]

    def probe(self, pod, probe):
        if "httpGet" in probe:
            import urllib.error
            import urllib.request
            get = probe["httpGet"]
            url = f"{get.get('scheme', 'HTTP').lower()}://{pod.ip}:{get['port']}{get.get('path', '/')}"
            try:
                with urllib.request.urlopen(url, timeout=1) as r:
                    return 200 <= r.status < 400
            except (urllib.error.URLError, OSError, ValueError):
                return False
        port = (probe.get("grpc") or probe.get("tcpSocket"))["port"]
        if "grpc" in probe:
            r = subprocess.run([os.path.join(self.bin_dir, "specline"), "health", "--addr", f"{pod.ip}:{port}",
                                "--timeout-ms", "1000"], capture_output=True)
            return r.returncode == 0
        try:
            with socket.create_connection((pod.ip, port), timeout=1):
                return True
        except OSError:
            return False

    def wait_ready(self, timeout_s, pods=None):
        """Startup probes until they pass (within their failureThreshold x
        period), then readiness, of every container; fails on a container
        that exits or a pod that never gets ready. Periods are shortened to
        0.5 s to keep the rehearsal fast."""
        deadline = time.time() + timeout_s
        pods = pods if pods is not None else self.pods
        while time.time() < deadline:
            for pod in pods:
                for c, p in zip(pod.containers, pod.processes):
                    if p.poll() is not None:
                        raise RuntimeError(f"{pod.name} container {c['name']} exited {p.returncode}:\n"
                                           f"{tail(pod.log)}")
                if not pod.started:
                    pod.started = all(self.probe(pod, c["startupProbe"]) for c in pod.containers)
                if pod.started and not pod.ready:
                    pod.ready = all(self.probe(pod, c["readinessProbe"]) for c in pod.containers)
            if all(p.ready for p in pods):
                return
            time.sleep(0.5)
        raise RuntimeError("not ready: " + ", ".join(p.name for p in pods if not p.ready))

    def liveness_all(self):
        return {f"{p.name}/{c['name']}": self.probe(p, c["livenessProbe"]) for p in self.pods for c in p.containers}

    def terminate(self, pods=None):
        """What `helm uninstall` (pods None: all) or a rollout does to pods:
        the preStop hooks, SIGTERM to every container, then SIGKILL after
        terminationGracePeriodSeconds (counted from SIGTERM here). Returns
        each container's exit code ("pod/container")."""
        pods = self.pods if pods is None else pods
        codes = {}
        # A container's preStop exec hook runs first (in its namespaces, as
        # the kubelet runs it); SIGTERM follows when it returns.
        hooks = []
        for pod in pods:
            for c, p in zip(pod.containers, pod.processes):
                hook = c.get("lifecycle", {}).get("preStop", {}).get("exec")
                if hook and p.poll() is None:
                    hooks.append((subprocess.Popen(self._command_line(pod, {"command": hook["command"]}),
                                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), p))
                elif p.poll() is None:
                    p.send_signal(signal.SIGTERM)
        for hook, p in hooks:
            hook.wait()
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for pod in pods:
            grace = int(pod.spec.get("terminationGracePeriodSeconds", 30))
            deadline = time.time() + grace
            for c, p in zip(pod.containers, pod.processes):
                try:
                    codes[f"{pod.name}/{c['name']}"] = p.wait(timeout=max(0.1, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    codes[f"{pod.name}/{c['name']}"] = f"killed after {grace}s"
        return codes

    def down(self):
        for pod in self.pods:
            for p in pod.processes:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            subprocess.run(["ip", "netns", "del", pod.netns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        for d in reversed(self.created_dirs):
            try:
                os.rmdir(d)
            except OSError:
                pass


def free_subnet():
    """A 10.231.X.0/24 no interface uses yet, so rehearsals can run side by side."""
    used = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout
    for k in range(250):
        x = (os.getpid() + k) % 250 + 1
        if f" 10.231.{x}." not in used:
            return f"10.231.{x}"
    raise RuntimeError("no free 10.231.X.0/24 subnet")


def tail(path, n=30):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""
