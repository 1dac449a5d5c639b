#!/usr/bin/env bash
# Builds the documentation site into site/ in strict mode: a broken link, a
# missing anchor or an unresolved API reference fails the build. The API
# pages are read from python/loaderx statically, so nothing is compiled.
# requirements/docs.txt goes into the dev virtualenv once (a stamp file, as
# scripts/_env.sh does for requirements/dev.txt); after that the build needs
# no network (the theme loads no web fonts). `bash scripts/docs.sh serve`
# serves the site on localhost instead.
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
stamp="$VENV/.requirements-docs.sha"
want="$(sha256sum requirements/docs.txt | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    python -m pip install -q -r requirements/docs.txt
    echo "$want" > "$stamp"
fi
# Material prints a notice about MkDocs 2.0 on every build; it is not about this site.
export NO_MKDOCS_2_WARNING=1
if [ "${1:-}" = serve ]; then
    exec mkdocs serve --strict
fi
mkdocs build --strict "$@"
echo "site/index.html"
