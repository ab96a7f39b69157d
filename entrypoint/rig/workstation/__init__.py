"""The workstation behind `rig serve`: a generic supervisor, the services it runs (sshd, JupyterLab,
TensorBoard), the user they run as, and what root prepares in the volumes before dropping to it."""
