"""The variables that give user yolo the host user's ids, named once: rig.workstation.users reads
them; every message that tells a user to set them says their names from here."""

UID_ENV = "RIG_UID"
GID_ENV = "RIG_GID"
BOTH = f"{UID_ENV}/{GID_ENV}"  # as messages name the pair
