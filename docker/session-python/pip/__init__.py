"""`python -m pip` in user yolo's sessions is rig's gate (rig.workstation.pipgate), not pip itself.

This folder (/opt/rig/python) is on the sessions' PYTHONPATH only; the image's pip lives apart, in
/opt/rig/pip, and only the gate runs it.
"""
