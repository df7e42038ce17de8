#!/usr/bin/env bash
# Checks the Docker images' ingredients without a Docker daemon (ctest:
# DockerImage.RuntimeLibsAndStructure; deploy/docker/README.md).
#   check_image.sh BUILD_DIR            install BUILD_DIR's runtime component
#                                       into a temporary prefix and check it
#   check_image.sh --prefix DIR         check an installed tree as it is
#                                       (e.g. /opt/specline copied out of an
#                                       image with `docker cp`)
# a. the installed tree is self-contained and relocatable: it is installed,
#    moved elsewhere, and every binary runs from there with --help; every
#    RUNPATH is $ORIGIN-relative;
# b. every shared library an installed ELF file needs (NEEDED) comes from a
#    package in runtime-packages.txt, from debian:bookworm-slim itself, or
#    from the tree; CUDA libraries (and the dlopen()ed cuBLAS) from a package
#    in runtime-packages-cuda.txt; everything loaded indirectly resolves;
# c. static checks of Dockerfile and Dockerfile.cuda (final stage: numeric
#    non-root USER, no -dev package or compiler; COPY sources exist and are
#    not .dockerignored; the binaries the images promise are installed).
# Needs dpkg, ldd and readelf (Debian/Ubuntu with binutils). Exits non-zero
# with one "FAIL:" line per problem.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
RUNTIME_LIST=$HERE/runtime-packages.txt
CUDA_LIST=$HERE/runtime-packages-cuda.txt
DOCKERFILES=("$HERE/Dockerfile" "$HERE/Dockerfile.cuda")

# What both images ship in /opt/specline/bin (the build stage's --target
# list and the Helm chart's commands).
BINARIES=(specline specline-gateway specline-scheduler specline-stage specline-loadtest)
# These two may print their usage on stderr and exit non-zero for --help
# (older flag parsers: "--help needs a value"); the usage text proves they
# loaded and ran.
USAGE_OK_BINARIES=" specline-scheduler specline-stage "
CUDA_KERNELS_LIB=libspecline_cuda_kernels.so

# Packages of debian:bookworm-slim itself (`dpkg -l` in the image: the
# Essential/Required set). Only the shared-library ones matter here; a
# library from any of them needs no entry in runtime-packages.txt.
BASE_PACKAGES=" libc6 libc-bin libstdc++6 libgcc-s1 gcc-12-base zlib1g libzstd1
  liblzma5 libbz2-1.0 liblz4-1 libxxhash0 libcrypt1 libmd0 libacl1 libattr1
  libselinux1 libpcre2-8-0 libsystemd0 libudev1 libcap2 libcap-ng0 libaudit1
  libgcrypt20 libgpg-error0 libgnutls30 libnettle8 libhogweed6 libgmp10
  libidn2-0 libunistring2 libp11-kit0 libtasn1-6 libffi8 libseccomp2
  libblkid1 libmount1 libsmartcols1 libuuid1 libtinfo6 libdb5.3 libpam0g
  libsemanage2 libsepol2 libapt-pkg6.0 libdebconfclient0 "
BASE_PACKAGES=" $(echo $BASE_PACKAGES) "

# CUDA libraries whose local copy is not from a dpkg package (pip wheels,
# the .run installer, conda): soname -> NVIDIA apt package, with the
# package's CUDA suffix (-13-0) taken from Dockerfile.cuda's CUDA_VERSION.
#   libcudart.so.N            cuda-cudart-X-Y
#   libcublas.so.N            libcublas-X-Y     (dlopen()ed, see below)
#   libcublasLt.so.N          libcublas-X-Y
#   libnccl.so.2              libnccl2
cuda_package_for_soname() {
  case "$1" in
    libcudart.so.*) echo "cuda-cudart-$CUDA_PKG" ;;
    libcublas.so.* | libcublasLt.so.*) echo "libcublas-$CUDA_PKG" ;;
    libnccl.so.*) echo "libnccl2" ;;
    *) return 1 ;;
  esac
}
is_cuda_soname() { case "$1" in libcuda.so* | libcudart* | libcublas* | libnccl* | libnv*) return 0 ;; esac; return 1; }

failures=0
fail() { echo "check_image: FAIL: $*" >&2; failures=$((failures + 1)); }
info() { echo "check_image: $*"; }

usage() { echo "usage: $0 BUILD_DIR | --prefix INSTALLED_DIR" >&2; exit 2; }
[ $# -eq 1 ] || [ $# -eq 2 ] || usage
for tool in dpkg ldd readelf; do
  command -v "$tool" >/dev/null || { echo "check_image: needs $tool" >&2; exit 2; }
done

# Package lists: names only (comments and blank lines dropped).
read_list() { sed -e 's/#.*//' "$1" | tr -s ' \t' '\n\n' | sed '/^$/d'; }
RUNTIME_PACKAGES=" $(read_list "$RUNTIME_LIST" | tr '\n' ' ') "
CUDA_PACKAGES=" $(read_list "$CUDA_LIST" | tr '\n' ' ') "
CUDA_VERSION=$(sed -n 's/^ARG CUDA_VERSION=//p' "$HERE/Dockerfile.cuda" | head -1)
CUDA_PKG=${CUDA_VERSION//./-}
[ -n "$CUDA_VERSION" ] || fail "Dockerfile.cuda: no ARG CUDA_VERSION=X.Y"

############################################################################
# a. Install and run.
TMP=$(mktemp -d "${TMPDIR:-/tmp}/specline-check-image.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
if [ "$1" = --prefix ]; then
  [ $# -eq 2 ] && [ -d "$2" ] || usage
  PREFIX=$(cd "$2" && pwd)
  BUILD_DIR=
  info "checking the installed tree $PREFIX"
else
  [ $# -eq 1 ] && [ -f "$1/cmake_install.cmake" ] || {
    echo "check_image: $1 is not a configured CMake build folder" >&2; exit 2; }
  BUILD_DIR=$(cd "$1" && pwd)
  # Install, then move the tree: whatever runs afterwards cannot lean on
  # the install path, only on paths relative to the binaries.
  if ! cmake --install "$BUILD_DIR" --prefix "$TMP/installed" --component runtime >"$TMP/install.log" 2>&1; then
    cat "$TMP/install.log" >&2
    echo "check_image: FAIL: cmake --install $BUILD_DIR --component runtime failed" >&2
    exit 1
  fi
  if [ ! -d "$TMP/installed" ]; then
    echo "check_image: FAIL: cmake --install installed nothing (no install() rules with COMPONENT runtime?)" >&2
    exit 1
  fi
  mv "$TMP/installed" "$TMP/moved"
  PREFIX=$TMP/moved
  info "installed $BUILD_DIR (component runtime), moved to $PREFIX"
fi

for b in "${BINARIES[@]}"; do
  [ -x "$PREFIX/bin/$b" ] || fail "bin/$b is not installed (install(TARGETS $b ... COMPONENT runtime) missing?)"
done
if [ -n "$BUILD_DIR" ] && [ -f "$BUILD_DIR/kernels/$CUDA_KERNELS_LIB" ] && [ ! -f "$PREFIX/lib/$CUDA_KERNELS_LIB" ]; then
  fail "the build has kernels/$CUDA_KERNELS_LIB but the install has no lib/$CUDA_KERNELS_LIB"
fi
HAVE_CUDA=0
[ -f "$PREFIX/lib/$CUDA_KERNELS_LIB" ] && HAVE_CUDA=1
info "CUDA kernels library installed: $([ $HAVE_CUDA = 1 ] && echo yes || echo no)"

# The images find the CUDA libraries through ld.so.conf (NVIDIA's packages
# register their folder). Where this machine's toolkit is not on the system
# library path, the build tree reached it by RUNPATH: use those folders
# (outside the build tree) as LD_LIBRARY_PATH, standing in for the image's
# ld.so.conf entry.
RUN_ENV=(env -u LD_LIBRARY_PATH)
if [ $HAVE_CUDA = 1 ] && [ -n "$BUILD_DIR" ] &&
   env -u LD_LIBRARY_PATH ldd "$PREFIX/lib/$CUDA_KERNELS_LIB" 2>/dev/null | grep -q 'not found'; then
  extra=$(readelf -d "$BUILD_DIR/kernels/$CUDA_KERNELS_LIB" | sed -n 's/.*(R[UN]*PATH).*\[\(.*\)\]/\1/p' |
    tr ':' '\n' | grep -v -e '^$' -e "^$BUILD_DIR" -e '^\$ORIGIN' | paste -sd: -)
  if [ -n "$extra" ]; then
    info "note: the CUDA libraries are not on this machine's library path; using LD_LIBRARY_PATH=$extra (the build tree's RUNPATH) as the image's ld.so.conf would"
    RUN_ENV=(env "LD_LIBRARY_PATH=$extra")
  fi
fi

for b in "${BINARIES[@]}"; do
  [ -x "$PREFIX/bin/$b" ] || continue
  # No LD_LIBRARY_PATH (but the CUDA stand-in above): libraries must come
  # from the RUNPATH or the system.
  "${RUN_ENV[@]}" timeout 30 "$PREFIX/bin/$b" --help >"$TMP/out" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    info "bin/$b --help: ok"
  elif [[ $USAGE_OK_BINARIES == *" $b "* ]] && grep -q "usage: $b" "$TMP/out"; then
    info "bin/$b --help: exit $rc with its usage text: ok"
  else
    fail "bin/$b --help from the moved install exited $rc:"
    sed 's/^/    /' "$TMP/out" | head -20 >&2
  fi
done

############################################################################
# b. Shared libraries.
ELF_FILES=()
while IFS= read -r -d '' f; do
  [ "$(head -c 4 "$f" | od -An -c | tr -d ' \n')" = '177ELF' ] && ELF_FILES+=("$f")
done < <(find "$PREFIX" -type f -print0 | sort -z)
[ ${#ELF_FILES[@]} -gt 0 ] || fail "no ELF files under $PREFIX"

# The dpkg package owning a library path (merged /usr: dpkg may know it as
# /lib/... or /usr/lib/..., and as the symlink or its target). dpkg -S is
# slow, so every path is looked up once, in one batch (dpkg_prefetch).
declare -A OWNER=()
owner_candidates() {
  local p=$1
  printf '%s\n' "$p" "$(readlink -f "$p")" "${p/#\/lib\//\/usr\/lib\/}" "${p/#\/usr\/lib\//\/lib\/}"
}
dpkg_prefetch() {   # PATH...
  local p c line pkgs path
  local -a todo=()
  for p in "$@"; do
    while IFS= read -r c; do
      [ -n "${OWNER[$c]+x}" ] && continue
      OWNER[$c]=""
      todo+=("$c")
    done < <(owner_candidates "$p")
  done
  [ ${#todo[@]} -gt 0 ] || return 0
  while IFS= read -r line; do
    [[ $line == *": /"* ]] || continue
    pkgs=${line%%: /*}     # "pkg:arch, pkg2:arch: /path"
    path=/${line#*: /}
    pkgs=${pkgs%%,*}
    OWNER[$path]=${pkgs%%:*}
  done < <(dpkg -S "${todo[@]}" 2>/dev/null)
}
dpkg_owner() {      # PATH -> package on stdout; 1 when none
  local c
  dpkg_prefetch "$1"
  while IFS= read -r c; do
    [ -n "${OWNER[$c]-}" ] && { echo "${OWNER[$c]}"; return 0; }
  done < <(owner_candidates "$1")
  return 1
}

# Checks that library NAME (resolved to PATH, or "" when not found) needed
# by FILE is provided in the image.
check_needed() {
  local file=$1 name=$2 path=$3 pkg want
  local rel=${file#"$PREFIX"/}
  if [ -z "$path" ]; then
    fail "$rel needs $name, which does not resolve here"
    return
  fi
  case "$path" in "$PREFIX"/*) return ;; esac   # part of the install tree
  if [ "$name" = "$CUDA_KERNELS_LIB" ]; then
    fail "$rel loads $name from $path, not from the install tree (RUNPATH?)"
    return
  fi
  if pkg=$(dpkg_owner "$path"); then
    if is_cuda_soname "$name"; then
      if [[ $CUDA_PACKAGES == *" $pkg "* ]]; then
        :
      elif want=$(cuda_package_for_soname "$name") && [[ $CUDA_PACKAGES == *" $want "* ]]; then
        # Another packaging of the toolkit here (Debian's, another CUDA
        # minor): the image's package for this soname is listed.
        info "note: $name is from package $pkg here; the image installs $want"
      else
        fail "$rel needs $name from package $pkg, which runtime-packages-cuda.txt does not list"
      fi
    elif [[ $BASE_PACKAGES == *" $pkg "* ]]; then
      :
    elif [[ $RUNTIME_PACKAGES == *" $pkg "* ]]; then
      :
    else
      fail "$rel needs $name from package $pkg, which is neither in runtime-packages.txt nor in debian:bookworm-slim"
    fi
  elif want=$(cuda_package_for_soname "$name"); then
    # Not from dpkg (pip wheels / runfile toolkit): by name.
    if [[ $CUDA_PACKAGES != *" $want "* ]]; then
      fail "$rel needs $name (package $want), which runtime-packages-cuda.txt does not list"
    else
      info "$rel: $name is no dpkg file here ($path); the image's $want is listed"
    fi
    local major=${name##*.so.}
    if [[ $name == libcu* ]] && [ "$major" != "${CUDA_VERSION%%.*}" ]; then
      info "note: $name here is CUDA $major, Dockerfile.cuda builds with CUDA $CUDA_VERSION"
    fi
  else
    fail "$rel needs $name from $path, which belongs to no dpkg package and is no known CUDA library"
  fi
}

declare -A seen_needed=()
for f in "${ELF_FILES[@]}"; do
  rel=${f#"$PREFIX"/}
  # Relocatable: every RUNPATH/RPATH entry relative to the file.
  # (Empty entries are CMake's padding of build RPATHs, ignored here.)
  while read -r rp; do
    IFS=: read -ra parts <<<"$rp"
    for part in "${parts[@]}"; do
      if [ -n "$part" ] && [[ $part != '$ORIGIN'* ]]; then
        fail "$rel has RUNPATH $rp: $part is not \$ORIGIN-relative (the tree would not be relocatable)"
        break
      fi
    done
  done < <(readelf -d "$f" | sed -n 's/.*(R[UN]*PATH).*\[\(.*\)\]/\1/p')

  declare -A resolved=()
  while read -r line; do
    if [[ $line =~ ^([^[:space:]]+)[[:space:]]+=\>[[:space:]]+not\ found ]]; then
      resolved[${BASH_REMATCH[1]}]=""
    elif [[ $line =~ ^([^[:space:]]+)[[:space:]]+=\>[[:space:]]+([^[:space:]]+)[[:space:]]+\( ]]; then
      resolved[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
    elif [[ $line =~ ^(/[^[:space:]]*/)?(ld-linux[^[:space:]/]*)[[:space:]]+\( ]]; then
      # The dynamic loader, which ldd prints by its path alone; a binary
      # names it as NEEDED when it uses the loader's own symbols (xgrammar's
      # static library does: __tls_get_addr). libc6 ships it.
      resolved[${BASH_REMATCH[2]}]="${BASH_REMATCH[1]}${BASH_REMATCH[2]}"
    fi
  done < <("${RUN_ENV[@]}" ldd "$f" 2>/dev/null)
  dpkg_prefetch "${resolved[@]}"

  # Direct dependencies: must be listed (or base, or the tree).
  mapfile -t needed < <(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  for name in "${needed[@]}"; do
    seen_needed[$name]=1
    check_needed "$f" "$name" "${resolved[$name]-}"
  done
  # Indirect ones come with the listed packages' Depends; they must resolve
  # and belong to a package (not a library copied into /usr/local by hand).
  for name in "${!resolved[@]}"; do
    [[ " ${needed[*]} " == *" $name "* ]] && continue
    path=${resolved[$name]}
    if [ -z "$path" ]; then
      fail "$rel loads $name indirectly, which does not resolve here"
    elif [[ $path != "$PREFIX"/* ]] && ! dpkg_owner "$path" >/dev/null && ! cuda_package_for_soname "$name" >/dev/null; then
      fail "$rel loads $name from $path indirectly, which belongs to no dpkg package"
    fi
  done
  unset resolved
done

# cuBLAS is dlopen()ed by the CUDA kernels library (kernels/cuda/cublas_loader.cc),
# so neither NEEDED nor ldd shows it: the CUDA image must still ship it.
[[ $CUDA_PACKAGES == *" libcublas-$CUDA_PKG "* ]] ||
  fail "runtime-packages-cuda.txt lacks libcublas-$CUDA_PKG (dlopen()ed by kernels/cuda/cublas_loader.cc)"
for p in "cuda-cudart-$CUDA_PKG" libnccl2; do
  [[ $CUDA_PACKAGES == *" $p "* ]] || fail "runtime-packages-cuda.txt lacks $p"
done
if [ $HAVE_CUDA = 1 ]; then
  grep -aq 'libcublas\.so' "$PREFIX/lib/$CUDA_KERNELS_LIB" ||
    info "note: $CUDA_KERNELS_LIB names no libcublas.so (loader changed?)"
  cublas=$(ldconfig -p 2>/dev/null | awk -v n="libcublas.so.${CUDA_VERSION%%.*}" '$1 == n {print $NF; exit}')
  [ -z "$cublas" ] && [ -e "/usr/local/cuda/lib64/libcublas.so.${CUDA_VERSION%%.*}" ] &&
    cublas=/usr/local/cuda/lib64/libcublas.so.${CUDA_VERSION%%.*}
  if [ -n "$cublas" ]; then
    dpkg_prefetch "$cublas"
    check_needed "$PREFIX/lib/$CUDA_KERNELS_LIB" "libcublas.so.${CUDA_VERSION%%.*}" "$cublas"
  else
    info "note: libcublas.so.${CUDA_VERSION%%.*} not found on this machine; checked by name only"
  fi
fi
# Entries of runtime-packages.txt nothing needs any more (not a failure).
needed_owners=" "
for name in "${!seen_needed[@]}"; do
  for f in /usr/lib/*/"$name"; do
    [ -e "$f" ] || continue
    dpkg_prefetch "$f"
    needed_owners+="$(dpkg_owner "$f") "
  done
done
for p in $RUNTIME_PACKAGES; do
  [[ $needed_owners == *" $p "* ]] ||
    info "note: runtime-packages.txt lists $p, which no installed binary links directly"
done
info "checked the shared libraries of ${#ELF_FILES[@]} ELF files"

############################################################################
# c. Dockerfiles.
# Logical lines (continuations joined), comments dropped.
logical_lines() {
  sed -e '/^[[:space:]]*#/d' "$1" | awk '{ if (sub(/\\[[:space:]]*$/, "")) { buf = buf $0 " " } else { print buf $0; buf = "" } } END { if (buf != "") print buf }' |
    sed -e 's/^[[:space:]]*//' -e '/^$/d'
}
COMPILER_RE='^(build-essential|gcc|g\+\+|cpp|clang|llvm|binutils|make|cmake|ninja-build|cuda-nvcc|cuda-compiler|cuda-minimal-build|cuda-toolkit|cuda-crt|cuda-nvvm|cuda-libraries-dev)(-.*)?$'
# scripts/setup.sh's packages the images do not build with: Python, the
# training stack, and what only the tests and benchmarks use.
SETUP_NOT_IN_IMAGE=" python3 python3-pip python3-grpcio python3-grpc-tools python3-torch
  python3-venv libgtest-dev libgmock-dev libucx-dev prometheus openssl "
SETUP_NOT_IN_IMAGE=" $(echo $SETUP_NOT_IN_IMAGE) "
SETUP_PACKAGES=$(sed -n '/^PACKAGES=(/,/)/p' "$REPO/scripts/setup.sh" | sed -e 's/#.*//' -e 's/PACKAGES=(//' -e 's/)//' | tr -s ' \t' '\n\n' | sed '/^$/d')
[ -n "$SETUP_PACKAGES" ] || fail "could not read PACKAGES from scripts/setup.sh"
IGNORE_PATTERNS=$(sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' -e '/^!/d' "$REPO/.dockerignore" 2>/dev/null)

check_dockerfile() {
  local df=$1 name
  name=$(basename "$df")
  [ -f "$df" ] || { fail "$name is missing"; return; }
  mapfile -t lines < <(logical_lines "$df")
  local nfrom=0 i
  for i in "${!lines[@]}"; do [[ ${lines[$i]} =~ ^[[:space:]]*FROM[[:space:]] ]] && nfrom=$((nfrom + 1)); done
  [ $nfrom -ge 2 ] || fail "$name: not multi-stage ($nfrom FROM)"

  local stage=0 user="" final_installs=() build_installs=() targets="" cmd_bin="" final_text=""
  local copied=" "
  local all_text=""
  for line in "${lines[@]}"; do
    local kw=${line%%[[:space:]]*}
    kw=${kw^^}
    [ "$kw" = FROM ] && stage=$((stage + 1))
    all_text+="$line"$'\n'
    [ $stage = "$nfrom" ] && final_text+="$line"$'\n'
    case "$kw" in
      USER) [ $stage = "$nfrom" ] && user=$(awk '{print $2}' <<<"$line") ;;
      CMD) [ $stage = "$nfrom" ] && cmd_bin=$(sed -n 's/^CMD[[:space:]]*\[[[:space:]]*"\([^"]*\)".*/\1/p' <<<"$line") ;;
      COPY | ADD)
        read -ra words <<<"$line"
        local args=() w
        for w in "${words[@]:1}"; do
          [[ $w == --from=* ]] && { args=(); continue 2; }
          [[ $w == --* ]] && continue
          args+=("$w")
        done
        local n=${#args[@]} s
        [ "$n" -ge 2 ] || { fail "$name: cannot parse '$line'"; continue; }
        for s in "${args[@]:0:n-1}"; do
          [[ $s == http://* || $s == https://* || $s == *'${'* ]] && continue
          s=${s#./}
          copied+="${s%/} "
          compgen -G "$REPO/$s" >/dev/null || fail "$name: $kw source '$s' does not exist in the repository"
          local pat
          while IFS= read -r pat; do
            [ -n "$pat" ] || continue
            pat=${pat#/}; pat=${pat%/}
            # shellcheck disable=SC2053
            if [[ $s == $pat || $s == $pat/* ]]; then
              fail "$name: $kw source '$s' is excluded by .dockerignore pattern '$pat'"
            fi
          done <<<"$IGNORE_PATTERNS"
        done
        ;;
      RUN)
        # Words after each "apt-get install" up to the next && ; |
        local seg
        while IFS= read -r seg; do
          [[ $seg == *"apt-get install"* ]] || continue
          [ $stage = "$nfrom" ] && [[ $seg != *--no-install-recommends* ]] &&
            fail "$name: the final stage's '$seg' lacks --no-install-recommends"
          local pkgs=${seg#*apt-get install}
          for w in $pkgs; do
            [[ $w == -* ]] && continue
            w=${w%%=*}
            if [ $stage = "$nfrom" ]; then final_installs+=("$w"); else build_installs+=("$w"); fi
          done
        done < <(sed -e 's/&&/\n/g' -e 's/;/\n/g' -e 's/|/\n/g' <<<"${line#*RUN}")
        if [[ $line == *"cmake --build"*"--target"* ]]; then
          targets=$(sed -e 's/.*--target//' -e 's/&&.*//' <<<"$line")
        fi
        ;;
    esac
  done

  # Every folder the top-level CMakeLists builds from (all with a
  # CMakeLists.txt but tests/ and bench/, switched off in the image).
  local d
  [[ $copied == *" CMakeLists.txt "* ]] || fail "$name: does not COPY the top-level CMakeLists.txt"
  for d in "$REPO"/*/CMakeLists.txt; do
    d=$(basename "$(dirname "$d")")
    case "$d" in tests | bench | build*) continue ;; esac
    [[ $copied == *" $d "* ]] || fail "$name: does not COPY $d/ (a CMake subdirectory)"
  done
  # ... and every literal add_subdirectory() of the top-level CMakeLists
  # but tests and bench (configure fails on a missing folder).
  local sub c ok
  while read -r sub; do
    case "$sub" in tests | bench) continue ;; esac
    ok=0
    for c in $copied; do
      [[ $sub == "$c" || $sub == "$c"/* ]] && { ok=1; break; }
    done
    [ $ok = 1 ] || fail "$name: does not COPY $sub/ (add_subdirectory in the top-level CMakeLists.txt)"
  done < <(sed -n 's/^[[:space:]]*add_subdirectory(\([^)$[:space:]]*\)).*/\1/p' "$REPO/CMakeLists.txt")

  # Final stage: non-root numeric user.
  if [ -z "$user" ]; then
    fail "$name: the final stage has no USER (it would run as root)"
  else
    local uid=${user%%:*} gid=${user#*:}
    [[ $uid =~ ^[0-9]+$ ]] && [ "$uid" -ne 0 ] ||
      fail "$name: final USER '$user' is not a numeric non-zero uid (Kubernetes runAsNonRoot cannot verify names)"
    [[ $user != *:* ]] || [[ $gid =~ ^[0-9]+$ ]] || fail "$name: final USER '$user' has a non-numeric gid"
  fi
  # Final stage: packages, including the list files it installs.
  local -a listed
  if [[ $final_text == *runtime-packages.txt* ]]; then
    read -ra listed <<<"$RUNTIME_PACKAGES"; final_installs+=("${listed[@]}")
  fi
  if [[ $final_text == *runtime-packages-cuda.txt* ]]; then
    read -ra listed <<<"$CUDA_PACKAGES"; final_installs+=("${listed[@]}")
  fi
  [[ $final_text == *runtime-packages.txt* ]] || fail "$name: the final stage does not install runtime-packages.txt"
  if [ "$name" = Dockerfile.cuda ]; then
    [[ $final_text == *runtime-packages-cuda.txt* ]] || fail "$name: the final stage does not install runtime-packages-cuda.txt"
  fi
  local p
  for p in "${final_installs[@]}"; do
    [[ $p == *-dev ]] && fail "$name: the final stage installs the development package $p"
    [[ $p =~ $COMPILER_RE ]] && fail "$name: the final stage installs the compiler/build tool $p"
  done
  # Build stage: setup.sh's build packages.
  for p in $SETUP_PACKAGES; do
    [[ $SETUP_NOT_IN_IMAGE == *" $p "* ]] && continue
    [[ " ${build_installs[*]} " == *" $p "* ]] ||
      fail "$name: the build stage does not install $p (a build package of scripts/setup.sh)"
  done
  # Promised binaries: the build targets and the default command.
  [ -n "$targets" ] || fail "$name: no 'cmake --build ... --target' in the build stage"
  local b
  for b in "${BINARIES[@]}"; do
    [[ " $targets " == *" $b "* ]] || fail "$name: the build stage does not build $b"
  done
  for b in $targets $cmd_bin; do
    [ -x "$PREFIX/bin/$b" ] || fail "$name promises $b, which cmake --install does not install into bin/"
  done
  [ -n "$cmd_bin" ] || fail "$name: no exec-form CMD in the final stage"
  grep -Eq '^[[:space:]]*ENTRYPOINT' <<<"$final_text" &&
    fail "$name: the final stage has an ENTRYPOINT (pods pick their binary with command:)"
  # The install prefix is what the final stage copies and puts on PATH.
  [[ $all_text == *"--prefix /opt/specline --component runtime"* ]] ||
    fail "$name: the build stage does not 'cmake --install ... --prefix /opt/specline --component runtime'"
  [[ $final_text == *"COPY --from=build /opt/specline /opt/specline"* ]] ||
    fail "$name: the final stage does not copy /opt/specline from the build stage"
  [[ $final_text == *"PATH=/opt/specline/bin:"* ]] || fail "$name: PATH lacks /opt/specline/bin"
  [[ $all_text == *"-DSPECLINE_BUILD_TESTS=OFF"* && $all_text == *"-DSPECLINE_BUILD_BENCH=OFF"* ]] ||
    fail "$name: the image build should switch tests and benchmarks off"
  info "$name: checked"
}

for df in "${DOCKERFILES[@]}"; do check_dockerfile "$df"; done
CUDA_DF=$(cat "$HERE/Dockerfile.cuda" 2>/dev/null)
[[ $CUDA_DF == *"-DSPECLINE_ENABLE_CUDA=ON"* ]] || fail "Dockerfile.cuda does not build the CUDA backend"
[[ $CUDA_DF == *"NVIDIA_DRIVER_CAPABILITIES=compute,utility"* ]] || fail "Dockerfile.cuda lacks NVIDIA_DRIVER_CAPABILITIES=compute,utility"
[[ $(cat "$HERE/Dockerfile") == *"-DSPECLINE_ENABLE_CUDA=OFF"* ]] || fail "Dockerfile (CPU) does not switch CUDA off"
for p in $CUDA_PACKAGES; do
  [[ $p == *-[0-9]*-[0-9]* && $p != *"-$CUDA_PKG" ]] &&
    fail "runtime-packages-cuda.txt: $p is not for CUDA $CUDA_VERSION (Dockerfile.cuda's CUDA_VERSION)"
done

if [ $failures -gt 0 ]; then
  echo "check_image: $failures problem(s)" >&2
  exit 1
fi
info "all checks passed"
