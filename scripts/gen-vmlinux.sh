#!/usr/bin/env bash
# Regenerate probes/include/vmlinux.h from the running kernel's BTF.
# CO-RE relocates field offsets at load time, so one committed header serves every kernel;
# rerun this only to reach types or fields that the committed header lacks.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
btf=${1:-/sys/kernel/btf/vmlinux}
[ -r "$btf" ] || { echo "no BTF at $btf: the kernel needs CONFIG_DEBUG_INFO_BTF=y" >&2; exit 1; }
command -v bpftool >/dev/null || { echo "bpftool not found: apt-get install -y bpftool" >&2; exit 1; }
bpftool btf dump file "$btf" format c > "$here/probes/include/vmlinux.h.new"
mv "$here/probes/include/vmlinux.h.new" "$here/probes/include/vmlinux.h"
echo "wrote $here/probes/include/vmlinux.h ($(wc -l < "$here/probes/include/vmlinux.h") lines)"
