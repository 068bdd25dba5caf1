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
	# for tp_btf), or, given as PATH=CATEGORY:NAME[,CATEGORY:NAME...], to those classic
	# tracepoints (perf_event_open and PERF_EVENT_IOC_SET_BPF, as libbpf does for tp/), prints
	# "attached" and holds the links until killed.
	cat >"$work/hold.py" <<'PY'
import ctypes, os, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
def sysc(nr, *a):
    r = libc.syscall(nr, *a)
    if r < 0:
        raise OSError(ctypes.get_errno(), "syscall %d" % nr)
    return r
def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr, 128)
    return sysc(321, cmd, buf, 128)
links = []
for arg in sys.argv[1:]:
    path, _, tps = arg.partition("=")
    p = ctypes.create_string_buffer(path.encode())
    fd = bpf(7, struct.pack("QII", ctypes.addressof(p), 0, 0))   # BPF_OBJ_GET
    if not tps:
        links.append(bpf(17, struct.pack("QI", 0, fd)))          # BPF_RAW_TRACEPOINT_OPEN
        continue
    for tp in tps.split(","):
        cat, name = tp.split(":")
        tid = int(open("/sys/kernel/tracing/events/%s/%s/id" % (cat, name)).read())
        # perf_event_attr: PERF_TYPE_TRACEPOINT, this tracepoint, one sample per event
        attr = ctypes.create_string_buffer(struct.pack("IIQQQQQII", 2, 128, tid, 1, 0, 0, 0, 1, 0), 128)
        pfd = sysc(298, attr, -1, 0, -1, 8)                       # perf_event_open, cpu 0, CLOEXEC
        if libc.ioctl(pfd, 0x40042408, ctypes.c_uint(fd)) != 0:   # PERF_EVENT_IOC_SET_BPF
            sys.exit("attaching %s to %s: %s" % (path, tp, os.strerror(ctypes.get_errno())))
        libc.ioctl(pfd, 0x2400, 0)                                # PERF_EVENT_IOC_ENABLE
        links.append(pfd)
print("attached", flush=True)
time.sleep(3600)
PY
}

# Compiles BPF source $2 into object $3 with the headers floor_prepare put in $1 and scanprof's
# probes/include (vmlinux.h) from repository $4.
floor_compile() {
	clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -I"$4/probes/include" -I"$1/inc" -c "$2" -o "$3"
}
