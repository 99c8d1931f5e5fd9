#!/usr/bin/env bash
# Refresh constraints.txt on purpose: install the README's command unpinned into a fresh venv,
# record every version it resolved, and print what moved. Then run the suite against the new pins
# (`bash .ci/run`) before committing them.
#
#   bash .ci/refresh_constraints.sh            # rewrites constraints.txt, prints the diff
#
# torch stays at the README's 2.13.0 (its CPU build; an unpinned torch pulls GB of CUDA wheels),
# recorded without the local "+cpu" label so that the constraint also matches the plain wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(mktemp -d)/venv
python -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -e ".[test,tfds,nq,serve,bench,plots]"
{
  echo "# Every dependency version the CI suite passed with (README: Install; .ci/run installs with it)."
  echo "# Refresh on purpose with: bash .ci/refresh_constraints.sh (written $(date -u +%F),"
  echo "# $("$venv/bin/python" --version), pip $("$venv/bin/python" -m pip --version | cut -d' ' -f2))."
  echo "# Check the newest releases without moving the pins: POI_JAX_UNPINNED=1 bash .ci/run"
  "$venv/bin/python" -m pip freeze --all --exclude-editable | grep -v -e "^-e " -e " @ " \
    -e '^pip==' | sed -E 's/^(torch==[^+]*)\+.*/\1/' | LC_ALL=C sort -f
} > constraints.txt.tmp
git diff --no-index --stat constraints.txt constraints.txt.tmp || true
mv constraints.txt.tmp constraints.txt
rm -rf "$(dirname "$venv")"
