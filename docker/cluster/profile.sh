# Login shells on the local cluster (make cluster-shell): /etc/profile resets PATH; the image's
# venv (rig, python) comes first again, and sbatch hands this environment to the job.
export PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
