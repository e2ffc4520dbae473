#!/usr/bin/env bash
# Print the commands of README.md's "Set up and run" section, one per line: the lines inside
# its fenced code blocks. .ci/run runs exactly these; plain bash + awk, because on a fresh
# machine nothing else may be installed yet.
set -euo pipefail
awk '
  /^## / { in_section = ($0 ~ /^## Set up and run/) }
  in_section && /^```/ { in_fence = !in_fence; next }
  in_section && in_fence && NF { print }
' "${1:-README.md}"
