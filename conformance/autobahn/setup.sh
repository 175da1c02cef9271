#!/usr/bin/env bash
# Installs Autobahn|Testsuite (`wstest`) under Python 2.7.18 into a
# virtualenv at target/autobahn/venv. Idempotent: a second run only checks.
# Python 2.7 comes from pyenv (or TETHER_PYTHON27); without it this fails
# loudly: the Autobahn runs never pass silently.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=target/autobahn/venv
if "$venv/bin/wstest" --help >/dev/null 2>&1; then
    exit 0
fi
py=""
for cand in "${TETHER_PYTHON27:-}" \
    "${PYENV_ROOT:-$HOME/.pyenv}/versions/2.7.18/bin/python2.7" \
    "$(PYENV_VERSION=2.7.18 pyenv which python2.7 2>/dev/null || true)" \
    "$(command -v python2.7 || true)"; do
    if [ -n "$cand" ] && [ -x "$cand" ] && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (2, 7))' 2>/dev/null; then
        py=$cand
        break
    fi
done
if [ -z "$py" ]; then
    echo "autobahn: FAILED: Python 2.7 is not installed (looked for pyenv 2.7.18, TETHER_PYTHON27, python2.7)." >&2
    echo "autobahn: Autobahn|Testsuite needs Python 2.7: install it with 'pyenv install 2.7.18'." >&2
    exit 1
fi
echo "autobahn: installing Autobahn|Testsuite under $py into $venv"
tools=target/autobahn/virtualenv-tool
"$py" -m pip install --disable-pip-version-check -q --target "$tools" 'virtualenv<20.22'
rm -rf "$venv"
PYTHONPATH=$tools "$py" -m virtualenv -q "$venv"
"$venv/bin/pip" install --disable-pip-version-check -q -r conformance/autobahn/requirements.txt
"$venv/bin/wstest" --help >/dev/null
echo "autobahn: wstest ready"
