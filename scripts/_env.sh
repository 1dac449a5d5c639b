# Shared set-up for the project scripts: a virtualenv with the dev and torch
# requirements and a cargo target dir that survives fresh clones.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/loaderx-target}"
VENV="${LOADERX_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
# Reinstall only when the requirements changed: the dev requirements, and
# torch on its own (requirements/torch.txt: a large install that rarely
# changes, so a change to dev.txt does not reinstall it).
for req in dev torch; do
    stamp="$VENV/.requirements-$req.sha"
    want="$(sha256sum "requirements/$req.txt" | cut -d' ' -f1)"
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        "$VENV/bin/python" -m pip install -q --upgrade pip
        "$VENV/bin/python" -m pip install -q -r "requirements/$req.txt"
        echo "$want" > "$stamp"
    fi
done
# shellcheck disable=SC1091
source "$VENV/bin/activate"
