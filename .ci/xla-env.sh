#!/usr/bin/env bash
# Build (or reuse) the separate virtual environment the XLA tests run in; print its directory last.
#
# torch_xla 2.9.0 needs exactly torch 2.9.0: the lower end of the torch range the project's `runtime`
# extra declares (tests/project/test_torch_range.py keeps the two equal; the main environment tests the upper
# end). So this environment installs torch and torch_xla at the versions below, the
# project's other dependencies read from pyproject.toml (every `torch` requirement left out), and
# the project itself with --no-deps. It lives under ~/.cache/resolver-ci/, keyed by the pinned
# versions, the dependency list and the build recipe (build_env below), and is reused while the
# marker file written last exists. Build time and disk use go to stderr.
#
# Usage: env_dir=$(.ci/xla-env.sh) && "$env_dir/bin/python" -m pytest -m xla
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

TORCH_VERSION=2.9.0
TORCH_XLA_VERSION=2.9.0

# The project's dependencies except torch: [project].dependencies and the `runtime`/`test` extras.
deps=$(python3 - "$repo/pyproject.toml" <<'PY'
import re, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
extras = project.get("optional-dependencies", {})
requirements = project.get("dependencies", []) + extras.get("runtime", []) + extras.get("test", [])
name = lambda r: re.split(r"[ <>=!~\[;]", r, maxsplit=1)[0].lower()
print(" ".join(sorted({r for r in requirements if name(r) != "torch"})))
PY
)

build_env() {
  local env_dir=$1
  python3 -m venv "$env_dir"
  "$env_dir/bin/pip" install -q --upgrade pip
  "$env_dir/bin/pip" install -q "torch==$TORCH_VERSION" "torch_xla==$TORCH_XLA_VERSION"
  # shellcheck disable=SC2086
  "$env_dir/bin/pip" install -q $deps
  # The pair must import and run one XLA:CPU computation before the environment counts as built.
  (cd / && PJRT_DEVICE=CPU "$env_dir/bin/python" -c "
import torch, torch_xla
assert torch.__version__.split('+')[0] == '$TORCH_VERSION', torch.__version__
t = torch.ones(2, device=torch_xla.device()) * 2
assert t.cpu().tolist() == [2.0, 2.0]
")
}

key=$( { declare -f build_env; echo "$TORCH_VERSION $TORCH_XLA_VERSION $deps"; } | sha256sum | cut -c1-16)
env_dir=${XDG_CACHE_HOME:-$HOME/.cache}/resolver-ci/xla-env-$key
marker=$env_dir/.complete

if [ -f "$marker" ]; then
  echo "xla-env: reusing $env_dir (built $(cat "$marker"))" >&2
else
  t0=$SECONDS
  echo "xla-env: building $env_dir (torch==$TORCH_VERSION, torch_xla==$TORCH_XLA_VERSION)" >&2
  rm -rf "$env_dir"
  mkdir -p "$(dirname "$env_dir")"
  build_env "$env_dir" >&2
  date -u +%FT%TZ > "$marker"
  echo "xla-env: built in $((SECONDS - t0)) s" >&2
fi

# The project from this checkout, editable and without dependencies (its torch pin must not apply),
# so one environment serves every checkout; reinstalled only when it points at another checkout.
if ! (cd / && "$env_dir/bin/python" -c "import runtime, sys; sys.exit(not runtime.__file__.startswith('$repo/'))") 2>/dev/null; then
  "$env_dir/bin/pip" install -q --no-deps -e "$repo" >&2
fi
echo "xla-env: disk use $(du -sh "$env_dir" | cut -f1)" >&2

# Each change of the inputs makes a new ~7 GB environment: keep this one and the one used most
# recently before it (switching between two branches stays cheap); remove older complete ones.
touch "$env_dir/.last-used"
mapfile -t others < <(ls -1dt "$(dirname "$env_dir")"/xla-env-*/.last-used "$(dirname "$env_dir")"/xla-env-*/.complete \
  2>/dev/null | xargs -r -n1 dirname | awk '!seen[$0]++' | grep -vxF "$env_dir" || true)
for old in "${others[@]:1}"; do
  echo "xla-env: removing the older environment $old" >&2
  rm -rf "$old"
done
echo "$env_dir"
