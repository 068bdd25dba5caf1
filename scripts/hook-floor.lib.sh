# shellcheck shell=bash
# Shared by scripts/syscall-hook-floor and scripts/packet-hook-floor (sourced, not run): building
# an object of empty tp_btf programs against scanprof's headers, and holding some of its pinned
# programs attached.

# Prepares directory $1 for floor_compile and floor_hold: libbpf's headers from scanprof's
# build (cargo's registry) and the holder script. Fails with a message naming $2 (the caller).
floor_prepare() {
	local work=$1 who=$2 helpers
	helpers=$(find "${CARGO_HOME:-$HOME/.cargo}/registry/src" -path '*libbpf-sys*/libbpf/src/bpf_helpers.h' 2>/dev/null | head -1 || true)
	if [ -z "$helpers" ]; then
		echo "$who: libbpf's bpf_helpers.h not found: build scanprof first (cargo build)" >&2
		return 1
	fi
	mkdir -p "$work/inc/bpf"
	cp "$(dirname "$helpers")"/bpf_*.h "$work/inc/bpf/"
	# Attaches the pinned programs named as arguments (BPF_RAW_TRACEPOINT_OPEN, as libbpf does
	# for tp_btf), prints "attached" and holds the links until killed.
	cat >"$work/hold.py" <<'PY'
import ctypes, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr, 128)
    r = libc.syscall(321, cmd, buf, 128)
    if r < 0:
        raise OSError(ctypes.get_errno(), "bpf")
    return r
links = []
for path in sys.argv[1:]:
    p = ctypes.create_string_buffer(path.encode())
    fd = bpf(7, struct.pack("QII", ctypes.addressof(p), 0, 0))   # BPF_OBJ_GET
    links.append(bpf(17, struct.pack("QI", 0, fd)))              # BPF_RAW_TRACEPOINT_OPEN
print("attached", flush=True)
time.sleep(3600)
PY
}

# Compiles BPF source $2 into object $3 with the headers floor_prepare put in $1 and scanprof's
# probes/include (vmlinux.h) from repository $4.
floor_compile() {
	clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -I"$4/probes/include" -I"$1/inc" -c "$2" -o "$3"
}
