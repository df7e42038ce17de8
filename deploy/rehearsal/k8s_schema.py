"""Validates rendered manifests against the Kubernetes API's own types, read
from the official Python client's generated models (PyPI `kubernetes`,
fetched by scripts/setup.sh; its model files are parsed, not imported, so
none of its dependencies are needed). Catches misspelled or misplaced
fields, wrong value types and missing required fields, which Helm itself
does not. Custom resources (ServiceMonitor) are skipped."""
import ast
import glob
import os
import re

DEFAULT_DIR = os.path.expanduser("~/.cache/specline/kubernetes-python/kubernetes/client/models")
ROOTS = {
    ("v1", "ConfigMap"): "V1ConfigMap", ("v1", "Service"): "V1Service",
    ("v1", "ServiceAccount"): "V1ServiceAccount", ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
    ("v1", "Secret"): "V1Secret", ("apps/v1", "Deployment"): "V1Deployment",
    ("apps/v1", "StatefulSet"): "V1StatefulSet", ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget",
    ("autoscaling/v2", "HorizontalPodAutoscaler"): "V2HorizontalPodAutoscaler",
}
QUANTITY_MAPS = {"limits", "requests", "capacity", "hard"}  # Quantity values may be numbers


def models_dir():
    d = os.environ.get("SPECLINE_K8S_MODELS", DEFAULT_DIR)
    return d if os.path.isdir(d) else None


class Schema:
    def __init__(self, directory):
        self.types = {}     # class -> {json name: type string}
        self.required = {}  # class -> {json names}
        for path in glob.glob(os.path.join(directory, "v*.py")):
            src = open(path).read()
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

    def validate(self, doc):
        root = ROOTS.get((doc.get("apiVersion"), doc.get("kind")))
        if root is None:
            return None  # not a built-in kind we know (a CRD)
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
