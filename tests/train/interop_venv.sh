# Sourced by the tests that run real Python clients (torch_reads_model.sh, torch_reads_language_model.sh,
# python_reads_consolidated_zero.sh, tensorboard_reads_events.sh): a cached virtual environment with
# one PyPI requirement installed. PyPI out of reach fails the test, loudly; it does not skip.
#   python_venv VENV PYTHON WORK REQUIREMENT "MODULE, ..." [--system-site-packages]
# made again unless VENV's python imports every MODULE; --system-site-packages lets it see Debian's
# python3-torch and python3-numpy. Needs a fail() of the caller's.
python_venv() {
  local venv=$1 python=$2 work=$3 req=$4 modules=$5 site=${6:-}
  "$venv/bin/python" -c "import $modules" 2>/dev/null && return 0
  rm -rf "$venv"
  "$python" -m venv $site "$venv" ||
    fail "$python -m venv failed (Debian: apt install python3-venv; scripts/install-deps.sh does)"
  if ! "$venv/bin/python" -m pip install --disable-pip-version-check --no-input --timeout 30 --retries 2 -q \
      "$req" >"$work.pip.log" 2>&1; then
    cat "$work.pip.log" >&2
    rm -rf "$venv"
    fail "could not install $req from PyPI into $venv (is https://pypi.org reachable? a proxy needs" \
         "HTTPS_PROXY; pip's output is above). This test needs the real client; it does not skip."
  fi
}

# The interop tests' environment: Debian's torch and numpy plus PyPI's safetensors.
#   interop_venv VENV PYTHON WORK "MODULE, ..."
interop_venv() {
  python_venv "$1" "$2" "$3" "${LOCKSTEP_SAFETENSORS_REQUIREMENT:-safetensors==0.8.0}" "safetensors, $4" \
    --system-site-packages
}
