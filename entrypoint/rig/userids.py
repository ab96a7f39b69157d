"""The variables that give user yolo the host user's ids, named once: rig.workstation.users reads
them; every message that tells a user to set them says their names from here."""

from rig import envnumbers

UID_ENV = "RIG_UID"
GID_ENV = "RIG_GID"
BOTH = f"{UID_ENV}/{GID_ENV}"  # as messages name the pair
MAX_ID = 2**31 - 2
UID = envnumbers.Number(
    UID_ENV, low=1, high=MAX_ID, whole=True, hint=f"your host id, e.g. {UID_ENV}=$(id -u)"
)
GID = envnumbers.Number(
    GID_ENV, low=1, high=MAX_ID, whole=True, hint=f"your host group id, e.g. {GID_ENV}=$(id -g)"
)
