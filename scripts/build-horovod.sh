#!/usr/bin/env bash
# Build Horovod (CPU only: Gloo, no MPI, no GPU operations) for the torch of the active virtual
# environment, cache the wheel under ~/.cache, and install it.
#
# Horovod 0.28.1 (the newest release, an sdist) pins C++14 in its CMake files, and torch 2.x's headers
# need C++17, so a plain `pip install horovod` fails. This script takes the sdist from the package
# registry (pip, nothing else), switches both CMakeLists.txt to C++17 in a temporary folder, and builds
# with `python setup.py bdist_wheel` (a `pip wheel --no-build-isolation` build leaves the torch
# extension out without a word, so the wheel is checked for it).
#
# Usage:  . .venv/bin/activate && scripts/build-horovod.sh
# Env:    HOROVOD_BUILD_CACHE  cache root (default ~/.cache/resolver-ci)
#         MAKEFLAGS            default -j2
set -euo pipefail

HOROVOD_VERSION=0.28.1
script_path=$(readlink -f "$0")
cache_root=${HOROVOD_BUILD_CACHE:-$HOME/.cache/resolver-ci}
export MAKEFLAGS=${MAKEFLAGS:--j2}
export PIP_DISABLE_PIP_VERSION_CHECK=1

die() { echo "build-horovod: error: $*" >&2; exit 1; }
step_start=$SECONDS
step() { echo "build-horovod: $1"; step_start=$SECONDS; }
step_done() { echo "build-horovod:   done in $((SECONDS - step_start)) s"; }

# --- preconditions: each missing tool is named with the fix ------------------------------------
[ -n "${VIRTUAL_ENV:-}" ] || die "no virtual environment is active; run '. .venv/bin/activate' first (Horovod is installed into it)"
python=$(command -v python) || die "no 'python' on PATH"
"$python" -c "import torch" 2>/dev/null \
  || die "torch is not installed in $VIRTUAL_ENV; run 'pip install torch==2.13.0' first (Horovod is built against it)"
for tool in cmake c++ cc make; do
  command -v "$tool" >/dev/null 2>&1 || case $tool in
    cmake) die "cmake (3.13 or newer) is not on PATH; install it (e.g. 'apt-get install cmake' or 'pip install cmake')" ;;
    c++|cc) die "no C/C++ compiler ('$tool') on PATH; install one with C++17 support (e.g. 'apt-get install build-essential')" ;;
    make) die "'make' is not on PATH; install it (e.g. 'apt-get install build-essential')" ;;
  esac
done

torch_version=$("$python" -c "import torch; print(torch.__version__)")
py_version=$("$python" -c "import sys; print('%d.%d' % sys.version_info[:2])")
script_hash=$(sha256sum "$script_path" | cut -c1-12)
key=$(printf '%s\n' "$HOROVOD_VERSION" "$torch_version" "$py_version" "$script_hash" | sha256sum | cut -c1-16)
cache_dir=$cache_root/horovod-$key
echo "build-horovod: horovod $HOROVOD_VERSION, torch $torch_version, python $py_version -> $cache_dir"

wheel_has_torch_extension() {
  "$python" - "$1" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
sys.exit(0 if any(n.startswith("horovod/torch/mpi_lib_v2") and n.endswith(".so") for n in names) else 1)
PY
}

wheel=$(ls "$cache_dir"/horovod-*.whl 2>/dev/null | head -n1 || true)
if [ -n "$wheel" ] && wheel_has_torch_extension "$wheel"; then
  echo "build-horovod: reusing cached wheel $wheel"
else
  command -v nice >/dev/null || die "'nice' missing"
  work=$(mktemp -d "${TMPDIR:-/tmp}/build-horovod.XXXXXX")
  trap 'rm -rf "$work"' EXIT

  step "downloading the horovod==$HOROVOD_VERSION sdist from the package registry"
  "$python" -m pip download -q --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d "$work" \
    || die "could not download horovod==$HOROVOD_VERSION's sdist with pip (is the package registry reachable?)"
  tar -xzf "$work/horovod-$HOROVOD_VERSION.tar.gz" -C "$work"
  src=$work/horovod-$HOROVOD_VERSION
  step_done

  step "patching the C++ standard 14 -> 17 (torch's headers need C++17)"
  for f in CMakeLists.txt horovod/torch/CMakeLists.txt; do
    grep -q 'set(CMAKE_CXX_STANDARD 14)' "$src/$f" || die "$f has no 'set(CMAKE_CXX_STANDARD 14)' to patch: the sdist is not the expected one"
    sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$src/$f"
  done
  step_done

  step "installing the build tools (setuptools, wheel) into $VIRTUAL_ENV"
  "$python" -m pip install -q setuptools wheel || die "could not install setuptools and wheel with pip"
  step_done

  # CPU only, made explicit: no GPU operation is requested (HOROVOD_GPU_* unset), and CMake is told
  # there is no CUDA compiler, so an nvcc on PATH or /usr/local/cuda is not picked up.
  toolchain=$work/cpu-only.cmake
  cat > "$toolchain" <<'CMAKE'
set(CMAKE_CUDA_COMPILER "" CACHE FILEPATH "CPU-only Horovod build: no CUDA compiler" FORCE)
set(CMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit TRUE CACHE BOOL "CPU-only Horovod build" FORCE)
CMAKE
  step "building the wheel (Gloo, PyTorch; no MPI, TensorFlow, MXNet or GPU operations; MAKEFLAGS=$MAKEFLAGS); log: $work/build.log"
  (
    cd "$src"
    unset HOROVOD_GPU HOROVOD_GPU_OPERATIONS HOROVOD_GPU_ALLREDUCE HOROVOD_GPU_ALLGATHER \
      HOROVOD_GPU_BROADCAST HOROVOD_GPU_ALLTOALL HOROVOD_GPU_REDUCESCATTER HOROVOD_CUDA_HOME
    export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
      HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 CMAKE_TOOLCHAIN_FILE=$toolchain
    nice "$python" setup.py bdist_wheel > "$work/build.log" 2>&1
  ) || { tail -n 40 "$work/build.log" >&2; die "the Horovod build failed (last lines above)"; }
  built=$(ls "$src"/dist/horovod-*.whl | head -n1)
  step_done

  step "checking that the torch extension is in the wheel"
  wheel_has_torch_extension "$built" \
    || die "$built has no horovod/torch/mpi_lib_v2*.so: the torch extension was not built (see the log above)"
  if grep -q "HAVE_CUDA=1\|-DHAVE_GPU=1" "$work/build.log"; then die "the build enabled CUDA although a CPU-only build was asked"; fi
  mkdir -p "$cache_dir"
  cp "$built" "$cache_dir/"
  wheel=$cache_dir/$(basename "$built")
  step_done
fi

step "installing $wheel into $VIRTUAL_ENV"
"$python" -m pip install -q --force-reinstall --no-deps "$wheel"
"$python" -m pip install -q cloudpickle psutil pyyaml packaging cffi
step_done

step "checking the installed Horovod"
"$python" - <<'PY'
import horovod.torch as hvd
assert hvd.gloo_built(), "Horovod was built without Gloo"
assert not hvd.mpi_built(), "Horovod was built with MPI although HOROVOD_WITHOUT_MPI=1"
assert not (hvd.cuda_built() or hvd.nccl_built()), "Horovod was built with GPU operations"
print("build-horovod: horovod.torch imports; Gloo yes, MPI no, GPU operations none")
PY
step_done
