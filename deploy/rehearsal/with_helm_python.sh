#!/usr/bin/env bash
# Runs a deploy/rehearsal script with the Python that has helm-python-sdk
# (Helm v4 as a library; scripts/setup.sh makes ~/.cache/specline/helm-venv).
# Used by the ctest Helm tests so that a missing venv FAILS with the fix
# instead of skipping or not running:
#
#   with_helm_python.sh PYTHON SCRIPT [ARGS...]
set -uo pipefail
py=${1:?usage: with_helm_python.sh PYTHON SCRIPT [ARGS...]}
shift
if ! "$py" -c 'import helm_python' >/dev/null 2>&1; then
  echo "FAILED: no Python with helm-python-sdk at '$py' (the Helm tests render the chart with it)." >&2
  echo "  Run scripts/setup.sh (it creates ~/.cache/specline/helm-venv), or make the venv by hand:" >&2
  echo "    /usr/bin/python3 -m venv ~/.cache/specline/helm-venv &&" >&2
  echo "    ~/.cache/specline/helm-venv/bin/python -m pip install helm-python-sdk==0.2.2" >&2
  echo "  or configure with -DSPECLINE_HELM_PYTHON=/path/to/python." >&2
  exit 1
fi
exec "$py" "$@"
