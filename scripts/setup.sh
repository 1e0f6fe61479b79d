#!/usr/bin/env bash
# Prepares a fresh Debian machine for opgen: the system packages (yaml-cpp,
# CLI11, nlohmann_json, GoogleTest, Python headers) and a virtualenv in .venv with requirements-dev.txt.
# Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
for pkg in libyaml-cpp-dev libcli11-dev nlohmann-json3-dev libgtest-dev clang-14 libclang-rt-14-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ! python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
  missing+=(python3-dev)
fi
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements-dev.txt
# torch_xla 2.9's wheel carries an old copy of torchax (importing flax at
# once) in the same top-level folder as the torchax package: whichever pip
# writes last wins. Write torchax's own files last, and check it.
torchax_pin=$(grep -E '^torchax==' requirements-dev.txt)
.venv/bin/python -m pip install -q --force-reinstall --no-deps "$torchax_pin"
.venv/bin/python -c "import torchax" || { echo "setup: torchax does not import"; exit 1; }
echo "setup: done ($(.venv/bin/python --version), jax $(.venv/bin/python -c 'import jax; print(jax.__version__)'))"
