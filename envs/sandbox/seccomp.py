"""The sandbox's seccomp filter, as a classic-BPF program built here (no libseccomp needed).

bubblewrap loads it with `--seccomp FD` just before it runs the command, so the command and
everything it starts are filtered (bubblewrap's own init is not). The filter denies, with
EPERM, the system calls a task never needs and that reach past the sandbox's namespaces:

- debugging other processes: `ptrace`, `process_vm_readv/writev`, `kcmp`, `pidfd_getfd`
  (a command could stop the sandbox's init and wedge itself until its timeout);
- mounts and namespaces: `mount`, `umount2`, the new mount API (`fsopen`, `fsconfig`,
  `fsmount`, `fspick`, `move_mount`, `open_tree`, `mount_setattr`), `pivot_root`, `chroot`,
  `unshare`, `setns`, and `clone` with any namespace flag (`clone3`, whose flags a filter
  cannot read, gets ENOSYS, so the C library falls back to `clone`);
- kernel attack surface: `keyctl`, `add_key`, `request_key`, `bpf`, `perf_event_open`,
  `userfaultfd`, `io_uring_*`, `open_by_handle_at`, `name_to_handle_at`, `lookup_dcookie`;
- the host itself: modules, `kexec_*`, `reboot`, `swapon/off`, clocks, `acct`, `quotactl`,
  `syslog`, `uselib`, `iopl/ioperm`, `vhangup`, `_sysctl`.

Every other call is allowed. A call made through another ABI (i386 on x86_64, or x32) kills
the process. Tables exist for x86_64 and aarch64; elsewhere `seccomp_unavailable()` says why
and the bwrap backend refuses to start unless opened with `seccomp=False`.
"""

from __future__ import annotations

import errno
import os
import platform
import struct
from functools import cache

# struct sock_filter {u16 code; u8 jt; u8 jf; u32 k}
_LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
RET_KILL_PROCESS = 0x80000000
_NR, _ARCH, _ARG0_LO = 0, 4, 16  # offsets in struct seccomp_data (little-endian)
X32_BIT = 0x40000000
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME
CLONE_NS_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 \
    | 0x40000000 | 0x00000080

DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "mount", "umount2", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
    "mount_setattr", "pivot_root", "chroot", "unshare", "setns",
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "open_by_handle_at", "name_to_handle_at", "lookup_dcookie",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
    "swapon", "swapoff", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "acct",
    "quotactl", "quotactl_fd", "syslog", "uselib", "iopl", "ioperm", "vhangup", "_sysctl",
)

# System call numbers (checked against libseccomp's tables in tests/envs/sandbox/test_sandbox.py).
SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
        "pidfd_getfd": 438, "mount": 165, "umount2": 166, "fsopen": 430, "fsconfig": 431,
        "fsmount": 432, "fspick": 433, "move_mount": 429, "open_tree": 428, "mount_setattr": 442,
        "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308, "keyctl": 250,
        "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298,
        "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "open_by_handle_at": 304, "name_to_handle_at": 303, "lookup_dcookie": 212,
        "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246,
        "kexec_file_load": 320, "reboot": 169, "swapon": 167, "swapoff": 168,
        "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159,
        "acct": 163, "quotactl": 179, "quotactl_fd": 443, "syslog": 103, "uselib": 134,
        "iopl": 172, "ioperm": 173, "vhangup": 153, "_sysctl": 156,
        "clone": 56, "clone3": 435,
    },
    "aarch64": {
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272,
        "pidfd_getfd": 438, "mount": 40, "umount2": 39, "fsopen": 430, "fsconfig": 431,
        "fsmount": 432, "fspick": 433, "move_mount": 429, "open_tree": 428, "mount_setattr": 442,
        "pivot_root": 41, "chroot": 51, "unshare": 97, "setns": 268, "keyctl": 219,
        "add_key": 217, "request_key": 218, "bpf": 280, "perf_event_open": 241,
        "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "open_by_handle_at": 265, "name_to_handle_at": 264, "lookup_dcookie": 18,
        "init_module": 105, "finit_module": 273, "delete_module": 106, "kexec_load": 104,
        "kexec_file_load": 294, "reboot": 142, "swapon": 224, "swapoff": 225,
        "settimeofday": 170, "clock_settime": 112, "clock_adjtime": 266, "adjtimex": 171,
        "acct": 89, "quotactl": 60, "quotactl_fd": 443, "syslog": 116, "vhangup": 58,
        "clone": 220, "clone3": 435,
    },
}
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def native_arch() -> str | None:
    return _MACHINES.get(platform.machine().lower())


def seccomp_unavailable() -> str | None:
    """None when the filter can be built for this machine, else why not."""
    if not os.path.exists("/proc/self/status"):
        return "no /proc to check seccomp support"
    arch = native_arch()
    if arch is None:
        return f"no seccomp syscall table for {platform.machine()!r} (have x86_64, aarch64)"
    return None


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


@cache
def filter_program(arch: str | None = None) -> bytes:
    """The filter for `arch` (default: this machine) as raw `struct sock_filter`s."""
    arch = arch or native_arch()
    if arch not in SYSCALLS:
        raise ValueError(f"no seccomp syscall table for {arch!r}")
    table = SYSCALLS[arch]
    denied = sorted({table[n] for n in DENIED if n in table})
    # Layout: arch check, [x32 check], one JEQ per denied call (to DENY), clone and clone3
    # checks, ALLOW, then the return blocks.
    prog: list[tuple[int, int, object, object]] = []  # jump targets: offsets or labels
    prog.append((_LD_ABS, _ARCH, 0, 0))
    prog.append((_JEQ, AUDIT_ARCH[arch], 0, "KILL"))
    prog.append((_LD_ABS, _NR, 0, 0))
    if arch == "x86_64":
        prog.append((_JGE, X32_BIT, "KILL", 0))
    for nr in denied:
        prog.append((_JEQ, nr, "DENY", 0))
    prog.append((_JEQ, table["clone3"], "ENOSYS", 0))
    prog.append((_JEQ, table["clone"], 0, "ALLOW"))
    prog.append((_LD_ABS, _ARG0_LO, 0, 0))  # clone's flags (x86_64 and aarch64: first arg)
    prog.append((_JSET, CLONE_NS_FLAGS, "DENY", "ALLOW"))
    labels = {"ALLOW": len(prog), "DENY": len(prog) + 1, "ENOSYS": len(prog) + 2,
              "KILL": len(prog) + 3}
    prog += [(_RET, RET_ALLOW, 0, 0), (_RET, RET_ERRNO | errno.EPERM, 0, 0),
             (_RET, RET_ERRNO | errno.ENOSYS, 0, 0), (_RET, RET_KILL_PROCESS, 0, 0)]
    def rel(target: object, at: int) -> int:
        if not isinstance(target, str):
            return int(target)  # type: ignore[call-overload]
        off = labels[target] - at - 1
        if not 0 <= off <= 255:
            raise ValueError("seccomp program too long for a jump")
        return off

    return b"".join(_ins(code, k, rel(jt, i), rel(jf, i)) for i, (code, k, jt, jf) in enumerate(prog))


def decide(program: bytes, nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """Run `program` on one system call, as the kernel would (for tests): the action."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, *(list(args) + [0] * 6)[:6])
    insns = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == _LD_ABS:
            acc = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code == _RET:
            return k
        else:
            taken = {_JEQ: acc == k, _JGE: acc >= k, _JSET: bool(acc & k)}[code]
            pc += 1 + (jt if taken else jf)


def write_program_fd() -> int:
    """A pipe's read end holding the filter (bwrap reads it to EOF): pass it with pass_fds
    and close it after the command started."""
    program = filter_program()
    r, w = os.pipe()
    try:
        os.write(w, program)  # a few hundred bytes: far below the pipe buffer
    finally:
        os.close(w)
    return r
