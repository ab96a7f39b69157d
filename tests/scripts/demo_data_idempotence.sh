# rig demo-data twice alike, then different, then over a folder it did not make.
D="--train 2 --val 1 --imgsz 64"
rig demo-data /tmp/d $D && rig demo-data /tmp/d $D && echo SAME-OK
rig demo-data /tmp/d --train 3 --val 1 --imgsz 64; echo "DIFFERENT-RC $?"
mkdir -p /tmp/mine && touch /tmp/mine/keep
rig demo-data /tmp/mine --force; echo "MINE-RC $? $(ls /tmp/mine)"
