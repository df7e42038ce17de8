#!/usr/bin/env bash
# Gives the training recipes a Python with torch, numpy and safetensors (and
# gguf, to read GGUF models; jinja2 for the chat template check) and prints
# its path on the last line
# (idempotent; a second run only checks):
#   - $PYTHON when set and it already has torch, numpy, safetensors and
#     jinja2 3.1.6 (e.g.
#     a GPU machine's own PyTorch; GGUF models then need `pip install gguf`);
#   - otherwise a virtual environment over Debian's CPU PyTorch
#     (python3-torch, installed by scripts/setup.sh or here) with
#     safetensors and gguf from PyPI, at ${SPECLINE_TRAIN_VENV:-~/.cache/specline/train-venv}.
# Use:  PY=$(bash training/setup.sh | tail -1); $PY training/train_ppsd.py ...
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# jinja2 (pinned to the goldens' version) is for scripts/test.sh's chat
# template conformance check (scripts/reference/jinja_fuzz.py).
has_jinja2() { "$1" -c "import jinja2, sys; sys.exit(jinja2.__version__ != '3.1.6')" 2>/dev/null; }
has_all() { "$1" -c "import torch, numpy, safetensors" 2>/dev/null && has_jinja2 "$1"; }
has_venv_all() { "$1" -c "import torch, numpy, safetensors, gguf, jsonschema" 2>/dev/null && has_jinja2 "$1"; }

if [ -n "${PYTHON:-}" ] && has_all "$PYTHON"; then
  echo "training: using $PYTHON (torch $("$PYTHON" -c 'import torch; print(torch.__version__)'))" >&2
  echo "$PYTHON"
  exit 0
fi

VENV=${SPECLINE_TRAIN_VENV:-$HOME/.cache/specline/train-venv}
if ! has_venv_all "$VENV/bin/python" ; then
  if ! /usr/bin/python3 -c "import torch, numpy, venv" 2>/dev/null; then
    echo "training: installing Debian's python3-torch python3-venv" >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-torch python3-venv >/dev/null
  fi
  echo "training: making $VENV (system torch + safetensors, gguf, jinja2 from PyPI)" >&2
  [ -x "$VENV/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$VENV"
  "$VENV/bin/python" -m pip install -q -r "$HERE/requirements-venv.txt"
fi
echo "training: $VENV/bin/python (torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)'))" >&2
echo "$VENV/bin/python"
