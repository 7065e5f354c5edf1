"""The seccomp filter program (`envs.sandbox.seccomp`): its decisions per syscall and
architecture, and its syscall numbers against libseccomp."""

from __future__ import annotations

import pytest


def test_seccomp_program_decisions() -> None:
    from envs.sandbox import seccomp as sc

    for arch, table in sc.SYSCALLS.items():
        prog, audit = sc.filter_program(arch), sc.AUDIT_ARCH[arch]
        deny = sc.RET_ERRNO | 1  # EPERM
        for name in sc.DENIED:
            if name in table:
                assert sc.decide(prog, table[name], audit) == deny, (arch, name)
        allowed = {n for n in range(0, 450)} - set(table.values())
        assert all(sc.decide(prog, n, audit) == sc.RET_ALLOW for n in allowed), arch
        clone = table["clone"]
        assert sc.decide(prog, clone, audit, (0x01200011,)) == sc.RET_ALLOW  # fork-like
        assert sc.decide(prog, clone, audit, (0x003D0F00,)) == sc.RET_ALLOW  # a thread
        for flag in (0x10000000, 0x20000000, 0x40000000, 0x00020000, 0x00000080):
            assert sc.decide(prog, clone, audit, (0x11 | flag,)) == deny, (arch, hex(flag))
        assert sc.decide(prog, table["clone3"], audit) == sc.RET_ERRNO | 38  # ENOSYS: use clone
        assert sc.decide(prog, 1, 0x40000003) == sc.RET_KILL_PROCESS  # another ABI (i386)
    assert sc.decide(sc.filter_program("x86_64"), 0x40000000 | 1, sc.AUDIT_ARCH["x86_64"]) \
        == sc.RET_KILL_PROCESS  # x32


def test_seccomp_numbers_match_libseccomp() -> None:
    import ctypes
    import ctypes.util

    from envs.sandbox import seccomp as sc

    name = ctypes.util.find_library("seccomp")
    if name is None:
        pytest.skip("libseccomp is not installed (apt-get install libseccomp2) to check against")
    lib = ctypes.CDLL(name)
    lib.seccomp_syscall_resolve_name_arch.restype = ctypes.c_int
    for arch, table in sc.SYSCALLS.items():
        for call, nr in table.items():
            assert lib.seccomp_syscall_resolve_name_arch(sc.AUDIT_ARCH[arch], call.encode()) == nr, \
                (arch, call)
