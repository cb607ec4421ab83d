"""`python -m ampfleet.core.unprivileged UID -- COMMAND...`: inside the sandbox, before
any user code, leave root for good and run COMMAND as host uid (and gid) UID.

bubblewrap run by a root worker makes no user namespace (one would map the sandbox's uid to
host root, so that owner permissions on host files held: /etc/shadow readable); it starts
this as root instead, which drops every supplementary group, sets real, effective and saved
ids, empties the capability bounding set and sets no_new_privs, so nothing the command runs
(a setuid binary, a file capability) can regain privilege. Standard library only: it runs
before the job's interpreter has anything to import.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Mapping

PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
LAST_CAPABILITY = 63


def drop_to(uid: int) -> None:
    if uid <= 0:
        raise SystemExit("refusing to run a sandbox as root")
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in range(LAST_CAPABILITY + 1):
        libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0)  # EINVAL past the kernel's last
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if os.getuid() != uid or os.geteuid() != uid or os.getegid() != uid:
        raise SystemExit("the sandbox's uid did not take")


def sandbox_home(environment: Mapping[str, str]) -> str:
    """The home of a sandbox's unprivileged uid: its private, writable temporary folder."""
    return environment.get("TMPDIR", "/tmp")  # noqa: S108 - the sandbox's own


def main() -> None:
    uid, separator, *command = sys.argv[1:]
    if separator != "--" or not command:
        raise SystemExit("usage: python -m ampfleet.core.unprivileged UID -- COMMAND...")
    drop_to(int(uid))
    os.environ["HOME"] = sandbox_home(os.environ)
    os.execvp(command[0], command)  # noqa: S606 - an argument list, as the sandbox gives


if __name__ == "__main__":
    main()
