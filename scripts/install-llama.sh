#!/usr/bin/env bash
# Build llama-cpp-python portably, once per (version, flags), into a wheel cache of our own,
# and install that wheel into the given virtualenv.
#
# Why: llama.cpp's default build (GGML_NATIVE) compiles for the build machine's CPU and turns
# on AMX where the CPU advertises it, which crashed the whole server on such a machine. pip's
# own wheel cache is keyed by the source, not by CMAKE_ARGS, so a wheel built with other flags
# would be silently reused: we build with --no-cache-dir into a folder named after the flags.
# The flags below run on every x86-64 CPU with AVX2 (Haswell, 2013, and later).
set -euo pipefail
VENV_BIN=${1:?usage: install-llama.sh VENV_BIN}
VERSION=${LLAMA_CPP_VERSION:-0.3.36}
case "$(uname -m)" in
  x86_64) FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" ;;
  *) FLAGS="-DGGML_NATIVE=OFF" ;;
esac
FLAGS="$FLAGS -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
KEY=$(printf '%s %s %s' "$VERSION" "$(uname -m)" "$FLAGS" | sha256sum | cut -c1-16)
CACHE=${NIGHTOWL_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nightowl/wheels}/llama-cpp-python-$VERSION-$KEY
STAMP="$VENV_BIN/../.llama-cpp-$KEY"
[ -f "$STAMP" ] && exit 0
if ! ls "$CACHE"/llama_cpp_python-*.whl >/dev/null 2>&1; then
  echo "Building llama-cpp-python $VERSION for any x86-64 with AVX2 (once; about 10 minutes on 2 cores)"
  mkdir -p "$CACHE.tmp"
  CMAKE_ARGS="$FLAGS" "$VENV_BIN/pip" wheel --quiet --no-cache-dir --no-deps --no-binary llama-cpp-python \
    -w "$CACHE.tmp" "llama-cpp-python==$VERSION"
  rm -rf "$CACHE" && mv "$CACHE.tmp" "$CACHE"
  printf '%s\n' "$FLAGS" > "$CACHE/FLAGS"
fi
"$VENV_BIN/pip" install --quiet --force-reinstall --no-deps "$CACHE"/llama_cpp_python-*.whl
"$VENV_BIN/pip" install --quiet "$CACHE"/llama_cpp_python-*.whl
rm -f "$VENV_BIN"/../.llama-cpp-*
touch "$STAMP"
