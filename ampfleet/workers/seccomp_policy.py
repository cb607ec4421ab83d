"""The seccomp filter of ranks that run bundled code, compiled by libseccomp.

In the spirit of container runtimes' default profiles (moby's `seccomp/default.json`): the
system calls that training, torch.compile, DataLoader workers, gloo and NCCL use are
allowed; those that reach past the process into the kernel's or another process's state
answer EPERM: tracing and reading other processes' memory, mounts and new namespaces, kernel
keys, BPF, perf events, userfaultfd, io_uring, modules, kexec, clocks, swap, reboot, handles
that bypass path permissions. `clone` may not ask for a new namespace and `clone3` answers
ENOSYS, so the C library falls back to `clone`, whose flags a filter can read.

bubblewrap installs the program (`--seccomp FD`) right before it runs the command, after
it set up the namespaces itself.
"""

from __future__ import annotations

import errno
import os
import tempfile

DENIED = (
    "acct",
    "add_key",
    "bpf",
    "chroot",
    "clock_adjtime",
    "clock_settime",
    "create_module",
    "delete_module",
    "finit_module",
    "fsconfig",
    "fsmount",
    "fsopen",
    "fspick",
    "get_kernel_syms",
    "init_module",
    "io_uring_enter",
    "io_uring_register",
    "io_uring_setup",
    "ioperm",
    "iopl",
    "kcmp",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "lookup_dcookie",
    "mount",
    "mount_setattr",
    "move_mount",
    "name_to_handle_at",
    "nfsservctl",
    "open_by_handle_at",
    "open_tree",
    "perf_event_open",
    "pivot_root",
    "process_vm_readv",
    "process_vm_writev",
    "ptrace",
    "query_module",
    "quotactl",
    "reboot",
    "request_key",
    "setns",
    "settimeofday",
    "swapoff",
    "swapon",
    "sysfs",
    "umount2",
    "unshare",
    "uselib",
    "userfaultfd",
    "ustat",
    "vhangup",
)
NAMESPACE_FLAGS = (
    0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
    | 0x00000080  # CLONE_NEWTIME
)


def compiled_filter() -> int:
    """A descriptor of the BPF program, at its start, for bwrap's `--seccomp`; the caller
    passes it to the child and closes it. OSError where libseccomp is missing."""
    import pyseccomp as seccomp  # type: ignore[import-untyped]  # libseccomp through ctypes

    policy = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    refused = seccomp.ERRNO(errno.EPERM)
    for name in DENIED:
        try:
            policy.add_rule(refused, name)
        except (RuntimeError, ValueError, OSError):
            continue  # not a system call on this architecture
    for bit in _bits(NAMESPACE_FLAGS):
        policy.add_rule(refused, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, bit, bit))
    policy.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    out = tempfile.TemporaryFile()  # noqa: SIM115 - its descriptor outlives this function
    policy.export_bpf(out)
    out.flush()
    fd = os.dup(out.fileno())
    out.close()
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _bits(mask: int) -> list[int]:
    return [1 << i for i in range(mask.bit_length()) if mask >> i & 1]
