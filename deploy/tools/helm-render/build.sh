#!/usr/bin/env bash
# Builds helm-render, or runs its Go unit tests, offline.
#
#   build.sh OUT_PATH    build the binary to OUT_PATH
#   build.sh --test      run `go test` on this directory
#
# Everything comes from Debian packages: the Go toolchain (golang-go) and
# the Go libraries in /usr/share/gocode, used in GOPATH mode (GO111MODULE=off)
# so nothing is fetched from a module proxy. Environment overrides:
#   GO                   the go binary (default: go on PATH)
#   HELM_RENDER_GOPATH   library root (default: /usr/share/gocode)
#   HELM_RENDER_GOCACHE  Go build cache (default: next to OUT_PATH, or a
#                        temporary directory for --test)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mode=${1:-}
if [[ -z "$mode" || "$mode" == -h || "$mode" == --help ]]; then
  echo "usage: $0 OUT_PATH | --test" >&2
  exit 2
fi

GO=${GO:-go}
if ! command -v "$GO" >/dev/null 2>&1; then
  echo "helm-render/build.sh: the Go toolchain ('$GO') is not installed; apt-get install golang-go" >&2
  exit 1
fi

gopath=${HELM_RENDER_GOPATH:-/usr/share/gocode}
# Import path -> Debian package that provides it (their own dependencies,
# e.g. semver, mergo and x/crypto for sprig, come with those packages).
missing=()
for dep in \
  "github.com/Masterminds/sprig:golang-github-masterminds-sprig-dev" \
  "github.com/Masterminds/semver:golang-github-masterminds-sprig-dev" \
  "github.com/ghodss/yaml:golang-github-ghodss-yaml-dev" \
  "gopkg.in/yaml.v2:golang-gopkg-yaml.v2-dev" \
  "github.com/xeipuuv/gojsonschema:golang-github-xeipuuv-gojsonschema-dev"; do
  if [[ ! -d "$gopath/src/${dep%%:*}" ]]; then
    missing+=("${dep#*:}")
  fi
done
if ((${#missing[@]})); then
  echo "helm-render/build.sh: missing Go packages under $gopath/src; apt-get install $(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')" >&2
  exit 1
fi

export GO111MODULE=off GOPATH="$gopath" GOFLAGS= CGO_ENABLED=0 GOTOOLCHAIN=local
cd "$here"
if [[ "$mode" == --test ]]; then
  if [[ -n "${HELM_RENDER_GOCACHE:-}" ]]; then
    export GOCACHE=$HELM_RENDER_GOCACHE
  else
    GOCACHE=$(mktemp -d)
    export GOCACHE
    trap 'rm -rf "$GOCACHE"' EXIT
  fi
  "$GO" vet .
  "$GO" test -count=1 .
  exit
fi

out=$mode
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
export GOCACHE=${HELM_RENDER_GOCACHE:-$(dirname "$out")/helm-render-gocache}
"$GO" build -trimpath -o "$out" .
