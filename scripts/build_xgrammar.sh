#!/usr/bin/env bash
# Builds xgrammar's C++ core (the grammar engine behind structured output,
# model/grammar/; docs/dependencies.md says why xgrammar) from its PyPI source
# distribution into a prefix CMake imports (SPECLINE_XGRAMMAR_ROOT):
#   $PREFIX/lib/libxgrammar.a, $PREFIX/include/{xgrammar,dlpack}/*.h
# Called by scripts/setup.sh; idempotent (a finished prefix is left alone).
# The only download is the pinned sdist from PyPI, checked against its sha256.
#   SPECLINE_XGRAMMAR_ROOT  install prefix (default ~/.cache/specline/xgrammar-0.2.8)
set -euo pipefail
VERSION=0.2.8
SDIST_SHA256=8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80
PREFIX=${SPECLINE_XGRAMMAR_ROOT:-$HOME/.cache/specline/xgrammar-$VERSION}
STAMP=$PREFIX/.built-$SDIST_SHA256

if [ -f "$STAMP" ] && [ -f "$PREFIX/lib/libxgrammar.a" ]; then
  exit 0
fi
start=$(date +%s)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# --no-binary xgrammar (not :all:): the sdist of xgrammar only; --no-deps:
# nothing of its Python build requirements is wanted.
python3 -m pip download -q --no-deps --no-binary xgrammar "xgrammar==$VERSION" -d "$work" >&2
sdist=$work/xgrammar-$VERSION.tar.gz
got=$(sha256sum "$sdist" | cut -d' ' -f1)
if [ "$got" != "$SDIST_SHA256" ]; then
  echo "build_xgrammar: $sdist has sha256 $got, expected $SDIST_SHA256" >&2
  exit 1
fi
tar xzf "$sdist" -C "$work"
src=$work/xgrammar-$VERSION

# The sdist's cmake/config.cmake turns the Python bindings on (nanobind, not
# shipped); a config.cmake in the build folder takes precedence over it.
mkdir -p "$src/build"
cat > "$src/build/config.cmake" <<'CFG'
set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)
set(XGRAMMAR_BUILD_CXX_TESTS OFF)
set(XGRAMMAR_ENABLE_CPPTRACE OFF)
set(XGRAMMAR_ENABLE_INTERNAL_CHECK OFF)
CFG
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
generator=()
if command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi
# xgrammar compiles with -flto=auto: its objects would then be GIMPLE only,
# recompiled at every link of every specline binary; -fno-lto (after it on
# the command line, so it wins) keeps plain machine code. -fPIC for the
# shared objects that may link it.
cmake -S "$src" -B "$src/build" "${generator[@]}" "${launcher[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="-fno-lto -fPIC" \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_INSTALL_PREFIX="$PREFIX" \
  -DCMAKE_INSTALL_LIBDIR=lib >&2
cmake --build "$src/build" -j"$(nproc)" >&2
# Over what is there (never a removal: the prefix may be the user's own).
cmake --install "$src/build" >&2
cp "$src/LICENSE" "$PREFIX/LICENSE"
touch "$STAMP"
echo "build_xgrammar: xgrammar $VERSION built into $PREFIX in $(( $(date +%s) - start )) s" >&2
