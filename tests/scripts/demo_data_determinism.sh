# Three demo sets, two with one seed: prints each one's checksum, the image count and the labels.
for s in a:3 b:3 c:4; do rig demo-data /tmp/${s%:*} --train 6 --val 2 --imgsz 96 --seed ${s#*:} >/dev/null
done
for d in a b c; do echo SUM $(cd /tmp/$d && find images labels -type f | sort | xargs cat | md5sum); done
echo COUNT $(ls /tmp/a/images/train | wc -l)
sed 's/^/LABEL /' /tmp/a/labels/*/*.txt
