"""A session that wants a service's port: kill the service (argv pattern), then bind it first.

squat_port.py PORT HOSTS SECONDS [KILL_PATTERN] [RELEASE_FILE]
Tries to bind and listen on PORT at each of HOSTS (comma-separated; IPv6 ones with IPV6_V6ONLY, all
with SO_REUSEADDR) every 10 ms for SECONDS. Without RELEASE_FILE it closes each at once and prints
one JSON line: the hosts it bound, the errors it met. With RELEASE_FILE it keeps what it bound
(writes RELEASE_FILE.holding once every host is bound) until RELEASE_FILE exists, for at most 120 s.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

port, hosts, seconds = int(sys.argv[1]), sys.argv[2].split(","), float(sys.argv[3])
pattern = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] else None
release = Path(sys.argv[5]) if len(sys.argv) > 5 else None
if pattern:
    pgrep = ["pgrep", "-o", "-u", str(os.getuid()), "-f", pattern]
    os.kill(
        int(subprocess.run(pgrep, capture_output=True, text=True, check=True).stdout.split()[0]),
        signal.SIGKILL,
    )
held: dict[str, socket.socket] = {}
bound, errors = set(), {}
deadline = time.monotonic() + seconds
while time.monotonic() < deadline and not (release and len(held) == len(hosts)):
    for host in hosts:
        if host in held:
            continue
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        s = socket.socket(family)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            s.bind((host, port))
            s.listen()
            bound.add(host)
            if release:
                held[host] = s
                continue
        except OSError as e:
            errors[host] = e.strerror
        s.close()
    time.sleep(0.01)
if release and held:
    Path(f"{release}.holding").write_text(" ".join(held))
    until = time.monotonic() + 120
    while not release.exists() and time.monotonic() < until:
        time.sleep(0.05)
print(json.dumps({"bound": sorted(bound), "errors": errors}))
