"""Validates rendered manifests against the Kubernetes API's own types, read
from the official Python client's generated models (PyPI `kubernetes`,
fetched by scripts/setup.sh; its model files are parsed, not imported, so
none of its dependencies are needed). Catches misspelled or misplaced
fields, wrong value types and missing required fields, which Helm itself
does not. The chart's LeaderWorkerSet and InferencePool are checked
against their APIs' Go types as transcribed here (CRD_TYPES), with their
pod templates as the built-in type; other custom resources (ServiceMonitor)
are skipped; a kind of a built-in API group that this table does not know
is an error, not a skip.

Without the types there is nothing to validate against: callers must report
a skip (or fail), never a pass. As a command:

    k8s_schema.py RENDERED.json...   (helm_chart.py render --output json)

exits 0 when every built-in object is valid, 1 with the errors, and 77
(ctest's skip code) with the reason when the types are not fetched."""
import ast
import glob
import json
import os
import re
import sys

DEFAULT_DIR = os.path.expanduser("~/.cache/specline/kubernetes-python/kubernetes/client/models")
ROOTS = {
    ("v1", "ConfigMap"): "V1ConfigMap", ("v1", "Service"): "V1Service",
    ("v1", "ServiceAccount"): "V1ServiceAccount", ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
    ("v1", "Secret"): "V1Secret", ("apps/v1", "Deployment"): "V1Deployment",
    ("apps/v1", "StatefulSet"): "V1StatefulSet", ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget",
    ("autoscaling/v2", "HorizontalPodAutoscaler"): "V2HorizontalPodAutoscaler",
    ("networking.k8s.io/v1", "NetworkPolicy"): "V1NetworkPolicy",
    ("rbac.authorization.k8s.io/v1", "Role"): "V1Role",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "V1RoleBinding",
}

# Custom resources the chart renders, by their API's own Go types (no
# Python client has them): field names, types and the fields the types
# mark required, transcribed from kubernetes-sigs/lws
# api/leaderworkerset/v1/leaderworkerset_types.go and
# kubernetes-sigs/gateway-api-inference-extension api/v1/inferencepool_types.go
# (v1.0). Their pod templates are checked as the built-in PodTemplateSpec;
# "enum:A|B" is a string of those values; "intorstr" an IntOrString. The
# CRDs' own OpenAPI schemas are what a cluster checks; this catches the
# same misspelled or misplaced fields, wrong types and missing required
# fields before one is at hand.
CRD_ROOTS = {
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): "LwsV1LeaderWorkerSet",
    ("inference.networking.k8s.io/v1", "InferencePool"): "InfV1InferencePool",
}
CRD_TYPES = {
    "LwsV1LeaderWorkerSet": ({"apiVersion": "str", "kind": "str", "metadata": "V1ObjectMeta",
                              "spec": "LwsV1LeaderWorkerSetSpec", "status": "object"}, set()),
    "LwsV1LeaderWorkerSetSpec": ({"replicas": "int", "leaderWorkerTemplate": "LwsV1LeaderWorkerTemplate",
                                  "rolloutStrategy": "LwsV1RolloutStrategy",
                                  "startupPolicy": "enum:LeaderCreated|LeaderReady",
                                  "networkConfig": "LwsV1NetworkConfig"}, {"leaderWorkerTemplate"}),
    "LwsV1LeaderWorkerTemplate": ({"leaderTemplate": "V1PodTemplateSpec", "workerTemplate": "V1PodTemplateSpec",
                                   "size": "int",
                                   "restartPolicy": "enum:Default|RecreateGroupOnPodRestart|RecreateGroupAfterStart|None",
                                   "subGroupPolicy": "LwsV1SubGroupPolicy",
                                   "volumeClaimTemplates": "list[V1PersistentVolumeClaim]",
                                   "persistentVolumeClaimRetentionPolicy":
                                       "V1StatefulSetPersistentVolumeClaimRetentionPolicy"}, {"workerTemplate"}),
    "LwsV1SubGroupPolicy": ({"subGroupPolicyType": "enum:LeaderWorker|LeaderExcluded", "subGroupSize": "int"}, set()),
    "LwsV1RolloutStrategy": ({"type": "enum:RollingUpdate",
                              "rollingUpdateConfiguration": "LwsV1RollingUpdateConfiguration"}, {"type"}),
    "LwsV1RollingUpdateConfiguration": ({"partition": "int", "maxUnavailable": "intorstr",
                                         "maxSurge": "intorstr"}, set()),
    "LwsV1NetworkConfig": ({"subdomainPolicy": "enum:Shared|UniquePerReplica"}, {"subdomainPolicy"}),
    "InfV1InferencePool": ({"apiVersion": "str", "kind": "str", "metadata": "V1ObjectMeta",
                            "spec": "InfV1InferencePoolSpec", "status": "object"}, {"spec"}),
    "InfV1InferencePoolSpec": ({"selector": "InfV1LabelSelector", "targetPorts": "list[InfV1Port]",
                                "endpointPickerRef": "InfV1EndpointPickerRef"},
                               {"selector", "targetPorts", "endpointPickerRef"}),
    "InfV1LabelSelector": ({"matchLabels": "dict(str, str)"}, {"matchLabels"}),
    "InfV1Port": ({"number": "int"}, {"number"}),
    "InfV1EndpointPickerRef": ({"group": "str", "kind": "str", "name": "str", "port": "InfV1Port",
                                "failureMode": "enum:FailOpen|FailClose"}, {"name"}),
}
QUANTITY_MAPS = {"limits", "requests", "capacity", "hard"}  # Quantity values may be numbers


SKIP_REASON = ("Kubernetes API types not fetched (the PyPI `kubernetes` client's models in "
               f"{DEFAULT_DIR}, or $SPECLINE_K8S_MODELS; scripts/setup.sh fetches them)")


def models_dir():
    """The client's model directory, or None when it is missing or holds no
    models (a half-extracted download is as good as none)."""
    d = os.environ.get("SPECLINE_K8S_MODELS", DEFAULT_DIR)
    return d if os.path.isfile(os.path.join(d, "v1_deployment.py")) else None


def builtin_group(api_version):
    """Whether apiVersion belongs to Kubernetes itself (core, apps, policy,
    *.k8s.io), as opposed to a CRD's group (monitoring.coreos.com)."""
    group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
    return "." not in group or group.endswith(".k8s.io")


class Schema:
    def __init__(self, directory):
        self.types = {}     # class -> {json name: type string}
        self.required = {}  # class -> {json names}
        # V1Deployment, ...; and group-prefixed names (RbacV1Subject).
        for path in glob.glob(os.path.join(directory, "v*.py")) + glob.glob(os.path.join(directory, "*_v1_*.py")):
            with open(path) as f:
                src = f.read()
            cls = re.search(r"^class (\w+)\(object\):", src, re.M)
            if not cls:
                continue
            types, attrs = {}, {}
            for node in ast.walk(ast.parse(src)):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    if node.targets[0].id == "openapi_types":
                        types = ast.literal_eval(node.value)
                    elif node.targets[0].id == "attribute_map":
                        attrs = ast.literal_eval(node.value)
            name = cls.group(1)
            self.types[name] = {attrs[k]: v for k, v in types.items()}
            self.required[name] = {attrs[k] for k in re.findall(r"Invalid value for `(\w+)`, must not be `None`", src)
                                   if k in attrs}
        for name, (fields, required) in CRD_TYPES.items():
            self.types[name], self.required[name] = dict(fields), set(required)

    def validate(self, doc):
        key = (doc.get("apiVersion"), doc.get("kind"))
        root = ROOTS.get(key) or CRD_ROOTS.get(key)
        if root is None:
            if builtin_group(str(doc.get("apiVersion", ""))):
                return [f"{doc.get('kind')}: {doc.get('apiVersion')} {doc.get('kind')} is a built-in kind "
                        "the validator does not know (add it to k8s_schema.ROOTS)"]
            return None  # a custom resource (CRD): no schema here
        if root not in self.types:
            return [f"{doc['kind']}: {root} is missing from the Kubernetes types"]
        errors = []
        self._check(doc, root, doc["kind"], errors, parent_key="")
        return errors

    def _check(self, value, typ, path, errors, parent_key):
        if typ.startswith("list["):
            if not isinstance(value, list):
                errors.append(f"{path}: expected a list, got {type(value).__name__}")
                return
            for i, v in enumerate(value):
                self._check(v, typ[5:-1], f"{path}[{i}]", errors, parent_key)
        elif typ.startswith("dict("):
            if not isinstance(value, dict):
                errors.append(f"{path}: expected a map, got {type(value).__name__}")
                return
            inner = typ[5:-1].split(", ", 1)[1]
            for k, v in value.items():
                if inner == "str" and parent_key in QUANTITY_MAPS and isinstance(v, (int, float)):
                    continue
                self._check(v, inner, f"{path}.{k}", errors, parent_key)
        elif typ == "str":
            if not isinstance(value, str):
                errors.append(f"{path}: expected a string, got {value!r}")
        elif typ == "int":
            if not isinstance(value, int) or isinstance(value, bool):
                errors.append(f"{path}: expected an integer, got {value!r}")
        elif typ == "bool":
            if not isinstance(value, bool):
                errors.append(f"{path}: expected true/false, got {value!r}")
        elif typ.startswith("enum:"):
            if value not in typ[5:].split("|"):
                errors.append(f"{path}: {value!r} is not one of {typ[5:].split('|')}")
        elif typ == "intorstr":
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                errors.append(f"{path}: expected an integer or a string, got {value!r}")
        elif typ in ("object", "datetime", "float"):
            pass  # IntOrString, Quantity, RawExtension, timestamps
        elif typ in self.types:
            if not isinstance(value, dict):
                errors.append(f"{path}: expected an object ({typ}), got {value!r}")
                return
            fields = self.types[typ]
            for k, v in value.items():
                if k not in fields:
                    errors.append(f"{path}: unknown field {k!r} ({typ})")
                elif v is not None:
                    self._check(v, fields[k], f"{path}.{k}", errors, k)
            for k in self.required[typ]:
                if k not in value and k not in ("apiVersion", "kind"):
                    errors.append(f"{path}: missing required field {k!r} ({typ})")
        else:
            errors.append(f"{path}: schema type {typ} unknown")


def main(paths):
    d = models_dir()
    if d is None:
        print(f"SKIPPED: {SKIP_REASON}")
        return 77
    schema = Schema(d)
    errors, checked = [], 0
    for path in paths:
        with open(path) as f:
            rendered = json.load(f)
        if isinstance(rendered, dict):
            rendered = rendered["manifests"]
        for doc in (r.get("manifest", r) for r in rendered):
            found = schema.validate(doc)
            if found is None:
                continue
            checked += 1
            errors += [f"{path}: {doc['kind']}/{doc.get('metadata', {}).get('name')}: {e}" for e in found]
    for e in errors:
        print(f"FAILED: {e}")
    print(f"{checked} built-in objects validated against the Kubernetes API types, {len(errors)} errors")
    return 1 if errors or not checked else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
