"""Prints, as one JSON line, the distributions installed for this Python and its marker environment
(PEP 508), which tests/helpers/lock.py's locked_runtime evaluates uv.lock's markers in."""

import json
import platform
import sys
from importlib import metadata

print(
    json.dumps(
        {
            "installed": {d.metadata["Name"]: d.version for d in metadata.distributions()},
            "environment": {
                "python_full_version": platform.python_version(),
                "python_version": ".".join(platform.python_version_tuple()[:2]),
                "sys_platform": sys.platform,
                "platform_machine": platform.machine(),
                "implementation_name": sys.implementation.name,
                "platform_python_implementation": platform.python_implementation(),
                "platform_system": platform.system(),
                "os_name": "posix",
                "extra": "",
            },
        }
    )
)
