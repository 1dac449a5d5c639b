# Shared set-up for the project scripts: a virtualenv with the dev and torch
# requirements and a cargo target dir that survives fresh clones.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/loaderx-target}"
# The JPEG decoder (libjpeg-turbo, built from source by turbojpeg-sys) needs
# cmake and nasm; a new machine gets them from Debian's packages.
if ! command -v cmake >/dev/null || ! command -v nasm >/dev/null; then
    sudo=""
    if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    $sudo apt-get install -y -qq cmake nasm >/dev/null 2>&1 \
        || { $sudo apt-get update -qq && $sudo apt-get install -y -qq cmake nasm >/dev/null; }
fi
VENV="${LOADERX_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
# Reinstall only when the requirements changed: the dev requirements, and
# torch on its own (requirements/torch.txt: a large install that rarely
# changes, so a change to dev.txt does not reinstall it). Without pip's
# cache: a new machine gains nothing from it, and torch's CUDA wheels would
# take the disk twice (a run once stopped on a full disk here).
for req in dev torch; do
    stamp="$VENV/.requirements-$req.sha"
    want="$(sha256sum "requirements/$req.txt" | cut -d' ' -f1)"
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        "$VENV/bin/python" -m pip install -q --no-cache-dir --upgrade pip
        "$VENV/bin/python" -m pip install -q --no-cache-dir -r "requirements/$req.txt"
        echo "$want" > "$stamp"
    fi
done
# shellcheck disable=SC1091
source "$VENV/bin/activate"
