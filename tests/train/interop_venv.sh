# Sourced by the interop tests (torch_reads_model.sh, torch_reads_language_model.sh,
# python_reads_consolidated_zero.sh): their cached virtual environment, made with
# --system-site-packages (so Debian's python3-torch and python3-numpy are seen) plus PyPI's
# safetensors. PyPI out of reach fails the test, loudly; it does not skip.
#   interop_venv VENV PYTHON WORK "MODULE, ..."   needs a fail() of the caller's
interop_venv() {
  local venv=$1 python=$2 work=$3 modules=$4
  local req=${LOCKSTEP_SAFETENSORS_REQUIREMENT:-safetensors==0.8.0}
  "$venv/bin/python" -c "import safetensors, $modules" 2>/dev/null && return 0
  rm -rf "$venv"
  "$python" -m venv --system-site-packages "$venv" ||
    fail "$python -m venv failed (Debian: apt install python3-venv; scripts/install-deps.sh does)"
  if ! "$venv/bin/python" -m pip install --disable-pip-version-check --no-input --timeout 30 --retries 2 -q \
      "$req" >"$work.pip.log" 2>&1; then
    cat "$work.pip.log" >&2
    rm -rf "$venv"
    fail "could not install $req from PyPI into $venv (is https://pypi.org reachable? a proxy needs" \
         "HTTPS_PROXY; pip's output is above). This test needs the real safetensors client; it does not skip."
  fi
}
